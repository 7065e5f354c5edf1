"""The isolating sandbox backends the tests run on, and why one cannot run here."""

from __future__ import annotations

import functools

BACKENDS = ("bwrap", "docker")
# The sandbox probes also run docker without its in-container runner (one `docker exec` per
# command: what an image without python3 gets): the label "docker-exec" opens "docker" with
# these variables set.
PROBE_BACKENDS = (*BACKENDS, "docker-exec")
LABELS = {"docker-exec": ("docker", {"TRAJFORGE_DOCKER_RUNNER": "0"})}


def resolve(label: str) -> tuple[str, dict[str, str]]:
    """The backend a test label opens, and the environment it needs."""
    return LABELS.get(label, (label, {}))


@functools.cache
def unusable(backend: str) -> str | None:
    """Why `backend` cannot run sandboxes here (None: it can). For docker this builds the
    offline image once (a content-hashed tag: later sessions find it)."""
    from envs.sandbox import SandboxError

    backend = resolve(backend)[0]
    if backend == "bwrap":
        from envs.sandbox.bwrap import bwrap_unusable

        return bwrap_unusable()
    if backend != "docker":
        return f"unknown backend {backend!r}"
    try:
        from envs.sandbox.docker import docker_unusable
    except ImportError as e:  # pragma: no cover - docker is a dependency
        return str(e)
    why = docker_unusable()
    if why is None:
        from envs.sandbox.image import build_image

        try:
            build_image()
        except SandboxError as e:
            why = f"the offline image could not be built: {e}"
    return why
