"""How a Docker sandbox's container is made: whether a daemon answers, which image, the
container's configuration (the limits, the seccomp profile, the volumes), the wrapper each
`docker exec` command runs in, and the tar archives that carry files into it.

`envs.sandbox.docker` runs the container (see its docstring for the whole design).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from envs.sandbox import seccomp as sc
from envs.sandbox.base import Limits, SandboxError
from envs.sandbox.process import MB

WORKSPACE = "/workspace"
IO_DIR = "/sandbox-io"  # a second small volume for stdin files
SANDBOX_USER = "1000:1000"
IMAGE_ENV = "TRAJFORGE_DOCKER_IMAGE"  # the image when none is given; else the offline one
IDLE = ["tail", "-f", "/dev/null"]
# Runs the command (argv after the timeout and the stdin file), then kills every other uid
# 1000 process (not the idle root processes) and empties /tmp and /dev/shm.
WRAPPER = ('t=$1; in=$2; shift 2; timeout -s KILL "$t" "$@" < "${in:-/dev/null}"; rc=$?; '
           'kill -9 -1 2>/dev/null; kill -9 -1 2>/dev/null; '
           'for f in /tmp/* /tmp/.[!.]* /tmp/..?* /dev/shm/* /dev/shm/.[!.]* /dev/shm/..?*; do '
           'if [ -e "$f" ] || [ -L "$f" ]; then find /tmp /dev/shm -mindepth 1 -delete 2>/dev/null; break; fi; '
           'done; exit $rc')
_ARCHES = {"x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
           "aarch64": ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]}


def docker_unusable() -> str | None:
    """None when a Docker daemon answers, else why not."""
    try:
        import docker
    except ImportError:
        return "the `docker` Python SDK is not installed (pip install docker)"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure means no usable daemon
        return f"no Docker daemon answers ({type(e).__name__}: {e})"
    return None


def seccomp_profile() -> dict[str, Any]:
    """A Docker seccomp profile with the decisions of `envs.sandbox.seccomp`."""
    rules: list[dict[str, Any]] = [
        {"names": list(sc.DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},  # ENOSYS: use clone
    ]
    for bit in range(32):  # clone with any namespace flag (each rule: flags & bit == bit)
        flag = 1 << bit
        if sc.CLONE_NS_FLAGS & flag:
            rules.append({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
                          "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]})
    profile: dict[str, Any] = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": rules}
    if (arch := sc.native_arch()) in _ARCHES:
        profile["architectures"] = _ARCHES[arch]
    return profile


def container_config(limits: Limits, image: str, *, volume: str, io_volume: str,
                     cpus: float = 1.0, labels: dict[str, str] | None = None,
                     seccomp: bool = True) -> dict[str, Any]:
    """Keyword arguments for `client.containers.run` that apply `limits`."""
    from docker.types import Ulimit

    if not cpus > 0:
        raise ValueError(f"cpus must be > 0, got {cpus!r}")
    fsize = limits.file_size_mb * MB
    tmp_mb = limits.disk_mb or 1024
    profile = json.dumps(seccomp_profile()) if seccomp else "unconfined"
    return {
        "image": image, "command": IDLE, "detach": True, "init": True,
        # the idle process is root (uid 1000 commands cannot signal it), with no capability
        "user": "0:0", "working_dir": WORKSPACE, "hostname": "sandbox",
        "network_disabled": not limits.network, "network_mode": "host" if limits.network else "none",
        "mem_limit": f"{limits.memory_mb}m", "memswap_limit": f"{limits.memory_mb}m",
        "pids_limit": limits.processes, "nano_cpus": int(cpus * 1e9),
        "read_only": True, "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges", f"seccomp={profile}"],
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={tmp_mb}m,mode=1777"}, "shm_size": f"{tmp_mb}m",
        "volumes": {volume: {"bind": WORKSPACE, "mode": "rw"},
                    # root's folder: the daemon writes stdin files there, commands cannot
                    io_volume: {"bind": IO_DIR, "mode": "rw"}},
        "ulimits": [Ulimit(name="cpu", soft=limits.cpu_s, hard=limits.cpu_s + 1),
                    Ulimit(name="fsize", soft=fsize, hard=fsize),
                    Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                    Ulimit(name="core", soft=0, hard=0)],
        "environment": {"HOME": "/tmp", "TMPDIR": "/tmp"},
        "labels": {"trajforge.sandbox": "1", **(labels or {})},
        "auto_remove": False,
    }


def exec_argv(argv: list[str], timeout: float, stdin_file: str | None = None) -> list[str]:
    """`argv` under `timeout -s KILL`, stdin from `stdin_file` (else /dev/null), then every
    other process of the sandbox user killed and /tmp emptied (`WRAPPER`)."""
    secs = f"{max(timeout, 0.001):.3f}"
    return ["sh", "-c", WRAPPER, "sh", secs, stdin_file or "", *argv]


def tar_of(files: dict[str, bytes], *, uid: int = 1000) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, uid
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_of_folder(source: Path) -> bytes:
    """`source`'s contents (not the folder itself) as a tar owned by the sandbox uid."""

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 1000
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in sorted(os.listdir(source)):
            tar.add(source / entry, arcname=entry, recursive=True, filter=own)
    return buf.getvalue()


def clean_rel(rel: str) -> str:
    if not isinstance(rel, str) or not rel or "\0" in rel or os.path.isabs(rel):
        raise ValueError(f"workspace path must be relative, got {rel!r}")
    norm = os.path.normpath(rel)
    if norm == "." or norm.startswith(".."):
        raise ValueError(f"workspace path {rel!r} leaves the workspace")
    return norm


_default_images: dict[str, str] = {}
_default_lock = threading.Lock()


def default_image(client: Any) -> str:
    """The offline image's tag on `client`'s daemon (built there once; then remembered)."""
    from envs.sandbox.image import build_image

    key = str(getattr(client.api, "base_url", ""))
    with _default_lock:
        tag = _default_images.get(key)
        if tag is None:
            tag = _default_images[key] = build_image(client)
        return tag


def local_folder(volume: Any) -> Path | None:
    """The volume's mount point when it is a folder on this host we may manage."""
    mount = (volume.attrs or {}).get("Mountpoint")
    if not mount or os.geteuid() != 0:
        return None
    path = Path(mount)
    return path if path.is_dir() and not path.is_symlink() else None


def resolve_image(client: Any, image: str | None, dockerfile: Path | str | None) -> str:
    """The tag of `dockerfile` built on `client`'s daemon (once per content), else `image`
    (pulled if missing), else `$TRAJFORGE_DOCKER_IMAGE`, else the offline image."""
    import docker

    if dockerfile is not None:
        path = Path(dockerfile)
        if not path.is_file():
            raise SandboxError(f"Dockerfile {str(path)!r} not found")
        tag = "trajforge-sandbox-custom:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            client.images.build(path=str(path.parent), dockerfile=path.name, tag=tag, rm=True)
        return tag
    image = image or os.environ.get(IMAGE_ENV) or None
    if not image:
        return default_image(client)
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        client.images.pull(image)
    return image
