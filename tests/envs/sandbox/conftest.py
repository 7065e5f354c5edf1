"""Shared by the sandbox tests: the backends they run on (a backend that cannot start here
skips with the reason), a source folder, and helpers to run probes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envs.sandbox import ExecResult, Limits, SandboxError, open_sandbox
from envs.sandbox.bwrap import bwrap_unusable
from tests.backends import PROBE_BACKENDS, resolve, unusable

REASON = bwrap_unusable()
needs_bwrap = pytest.mark.skipif(REASON is not None, reason=f"bubblewrap unusable: {REASON}")
SYS_PY = "/usr/bin/python3"
needs_py = pytest.mark.skipif(not os.path.exists(SYS_PY), reason="no system python3 in /usr/bin")
FAST = Limits(timeout_s=10, cpu_s=10)


@pytest.fixture(params=PROBE_BACKENDS)
def backend(request, monkeypatch) -> str:
    """Each isolating backend in turn (and docker without its runner), set up to open."""
    why = unusable(request.param)
    if why is not None:
        pytest.skip(f"{request.param} backend unusable: {why}")
    name, env = resolve(request.param)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return name


def unsafe(source: Path | None = None, limits: Limits = FAST):
    return open_sandbox("unsafe", source, limits, allow_unsafe=True)


def healthy(sb) -> None:
    """A normal command still works after an attack."""
    r = sb.run("echo ok && ls /workspace >/dev/null")
    assert r.ok and r.stdout == "ok\n", r


def python_probe(sb, code: str, **kw) -> ExecResult:
    sb.write_file("probe.py", code)
    return sb.run([SYS_PY, "probe.py"], **kw)


@pytest.fixture
def sb(backend: str):
    with open_sandbox(backend, None, FAST) as box:
        yield box


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    (d / "pkg").mkdir(parents=True)
    (d / "README").write_text("hello\n")
    (d / "pkg" / "mod.py").write_text("X = 1\n")
    (d / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (d / "run.sh").chmod(0o755)
    return d


@pytest.fixture
def docker_ok() -> None:
    """Skips unless the docker backend can run here (and then a missing daemon is a clear
    SandboxError, not a crash)."""
    why = unusable("docker")
    if why is not None:
        pytest.importorskip("docker")
        from envs.sandbox.docker import docker_unusable

        if docker_unusable() is not None:
            with pytest.raises(SandboxError):
                open_sandbox("docker", None, FAST)
        pytest.skip(f"docker backend not exercised: {why}")
