"""The Docker backend: one container per sandbox, through the `docker` SDK.

The container runs `sleep infinity` from `image` (a name, pulled if missing) or from an image
built from `dockerfile`; commands run as uid 1000 via `exec` with a read-only root, the
workspace in a named volume at `/workspace` (its host path, the volume's mountpoint on the
daemon's host, is `workdir`), a `/tmp` tmpfs, no network unless `Limits.network`, the memory
(`mem_limit`, no swap), process (`pids_limit`) and CPU (`nano_cpus`) limits of the cgroup,
rlimits as `ulimits`, all capabilities dropped and no-new-privileges. Files move with
`put_archive`/`get_archive`, so a remote daemon works too.

Each command runs under `timeout -s KILL` inside the container (the image needs `timeout`,
as in coreutils or busybox); past a grace period, or on an output flood, the container is
restarted, which kills every process in it (the workspace volume survives).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tarfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from envs.sandbox.base import SANDBOXES, ExecResult, Limits, SandboxError
from envs.sandbox.process import MB, OUTPUT_FLOOD_FACTOR, RawRun, classify, command_argv
from envs.sandbox.workspace import WorkspaceSnapshot

WORKSPACE = "/workspace"
IO_DIR = "/sandbox-io"  # a second small volume for stdin files
SANDBOX_USER = "1000:1000"
DEFAULT_IMAGE = "python:3.12-slim"
GRACE_S = 5.0  # past timeout + this, the container is restarted


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


def container_config(limits: Limits, image: str, *, volume: str, io_volume: str,
                     cpus: float = 1.0, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for `client.containers.run` that apply `limits`."""
    from docker.types import Ulimit

    if not cpus > 0:
        raise ValueError(f"cpus must be > 0, got {cpus!r}")
    fsize = limits.file_size_mb * MB
    tmp_mb = limits.disk_mb or 1024
    return {
        "image": image, "command": ["sleep", "infinity"], "detach": True,
        "user": SANDBOX_USER, "working_dir": WORKSPACE, "hostname": "sandbox",
        "network_disabled": not limits.network, "network_mode": None if limits.network else "none",
        "mem_limit": f"{limits.memory_mb}m", "memswap_limit": f"{limits.memory_mb}m",
        "pids_limit": limits.processes, "nano_cpus": int(cpus * 1e9),
        "read_only": True, "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"],
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={tmp_mb}m,mode=1777"},
        "volumes": {volume: {"bind": WORKSPACE, "mode": "rw"},
                    io_volume: {"bind": IO_DIR, "mode": "ro"}},
        "ulimits": [Ulimit(name="cpu", soft=limits.cpu_s, hard=limits.cpu_s + 1),
                    Ulimit(name="fsize", soft=fsize, hard=fsize),
                    Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                    Ulimit(name="core", soft=0, hard=0)],
        "environment": {"HOME": "/tmp", "TMPDIR": "/tmp"},
        "labels": {"trajforge.sandbox": "1", **(labels or {})},
        "auto_remove": False,
    }


def exec_argv(argv: list[str], timeout: float, stdin_file: str | None = None) -> list[str]:
    """`argv` under `timeout -s KILL` (whole process group), stdin from `stdin_file`."""
    secs = f"{max(timeout, 0.001):.3f}"
    if stdin_file is None:
        return ["timeout", "-s", "KILL", secs, *argv]
    return ["timeout", "-s", "KILL", secs, "sh", "-c", 'exec "$@" < "$0"', stdin_file, *argv]


def _tar_of(files: dict[str, bytes], *, uid: int = 1000) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, uid
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _tar_of_folder(source: Path) -> bytes:
    """`source`'s contents as a tar rooted at `workspace/`, owned by the sandbox uid."""

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 1000
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(source, arcname="workspace", recursive=True, filter=own)
    return buf.getvalue()


def _clean_rel(rel: str) -> str:
    if not isinstance(rel, str) or not rel or "\0" in rel or os.path.isabs(rel):
        raise ValueError(f"workspace path must be relative, got {rel!r}")
    norm = os.path.normpath(rel)
    if norm == "." or norm.startswith(".."):
        raise ValueError(f"workspace path {rel!r} leaves the workspace")
    return norm


@SANDBOXES.register("docker")
class DockerSandbox:
    """A container per sandbox; see the module docstring."""

    backend = "docker"

    def __init__(self, source: Path | None = None, limits: Limits | None = None, *,
                 image: str | None = None, dockerfile: Path | str | None = None,
                 cpus: float = 1.0, client: Any = None) -> None:
        self.limits = limits or Limits()
        if image and dockerfile:
            raise ValueError("give `image` or `dockerfile`, not both")
        if source is not None and not Path(source).is_dir():
            raise SandboxError(f"sandbox source {str(source)!r} is not a folder")
        try:
            import docker
        except ImportError as e:
            raise SandboxError("the docker backend needs `pip install docker`") from e
        try:
            self._client = client or docker.from_env()
            self._client.ping()
        except Exception as e:  # noqa: BLE001
            raise SandboxError(f"no Docker daemon answers: {e}") from e
        self._image = self._image_for(image, dockerfile)
        name = f"trajforge-sbx-{uuid.uuid4().hex[:12]}"
        self._volume = self._client.volumes.create(name=name, labels={"trajforge.sandbox": "1"})
        self._io_volume = self._client.volumes.create(name=name + "-io")
        self._lock = threading.RLock()
        self._closed = False
        self._n = 0
        try:
            cfg = container_config(self.limits, self._image, volume=self._volume.name,
                                   io_volume=self._io_volume.name, cpus=cpus)
            self._container = self._client.containers.run(name=name, **cfg)
            self._root("chown 1000:1000 /workspace")
            if source is not None:
                self._container.put_archive("/", _tar_of_folder(Path(source)))
            self.workdir = Path(self._volume.attrs.get("Mountpoint") or WORKSPACE)
            self._oom_base = self._oom_kills()
            self._initial = self.snapshot()
        except Exception:
            self.close()
            raise

    def _image_for(self, image: str | None, dockerfile: Path | str | None) -> str:
        import docker

        if dockerfile is not None:
            path = Path(dockerfile)
            if not path.is_file():
                raise SandboxError(f"Dockerfile {str(path)!r} not found")
            tag = "trajforge-sandbox:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            try:
                self._client.images.get(tag)
            except docker.errors.ImageNotFound:
                self._client.images.build(path=str(path.parent), dockerfile=path.name, tag=tag,
                                          rm=True)
            return tag
        name = image or DEFAULT_IMAGE
        try:
            self._client.images.get(name)
        except docker.errors.ImageNotFound:
            self._client.images.pull(name)
        return name

    def _root(self, cmd: str) -> tuple[int, bytes]:
        """A maintenance command as root (workspace ownership, cleanup)."""
        r = self._container.exec_run(["sh", "-c", cmd], user="0:0")
        return r.exit_code, r.output

    def _oom_kills(self) -> int:
        code, out = self._root("cat /sys/fs/cgroup/memory.events 2>/dev/null || true")
        for line in out.decode(errors="replace").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed")

    def run(self, cmd: str | list[str], *, timeout: float | None = None,
            env: dict[str, str] | None = None, stdin: str | None = None) -> ExecResult:
        argv = command_argv(cmd)
        t = self.limits.timeout_s if timeout is None else timeout
        if not t > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        with self._lock:
            self._check_open()
            stdin_file = None
            if stdin is not None:
                self._n += 1
                name = f"stdin-{self._n}"
                self._root(f"chmod 0777 {IO_DIR} 2>/dev/null || true")
                self._container.put_archive(IO_DIR, _tar_of({name: stdin.encode()}))
                stdin_file = f"{IO_DIR}/{name}"
            return self._exec(exec_argv(argv, t, stdin_file), t, env)

    def _exec(self, argv: list[str], t: float, env: dict[str, str] | None) -> ExecResult:
        api = self._client.api
        cap = self.limits.max_output_bytes
        t0 = time.perf_counter()
        exec_id = api.exec_create(self._container.id, argv, stdout=True, stderr=True,
                                  workdir=WORKSPACE, environment=env or {}, user=SANDBOX_USER)
        bufs = [bytearray(), bytearray()]
        seen = [0, 0]
        state: dict[str, Any] = {"flood": False, "error": None}

        def pump() -> None:
            try:
                for chunk in api.exec_start(exec_id, stream=True, demux=True):
                    for i, part in enumerate(chunk):
                        if not part:
                            continue
                        seen[i] += len(part)
                        bufs[i] += part[:max(0, cap - len(bufs[i]))]
                        if seen[i] > cap * OUTPUT_FLOOD_FACTOR:
                            state["flood"] = True
                            return
            except Exception as e:  # noqa: BLE001 - reported below
                state["error"] = e

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        reader.join(t + GRACE_S)
        killed_by = None
        if reader.is_alive() or state["flood"]:
            killed_by = "output" if state["flood"] else "timeout"
            self._container.restart(timeout=0)  # kills every process; the volume stays
            reader.join(5)
        elif state["error"] is not None:
            raise SandboxError(f"docker exec failed: {state['error']}")
        info = api.exec_inspect(exec_id)
        rc = info.get("ExitCode")
        rc = 137 if rc is None else int(rc)
        if killed_by is None and rc == 137 and time.perf_counter() - t0 >= t:
            killed_by = "timeout"  # `timeout -s KILL` fired
        raw = RawRun(returncode=rc, stdout=bytes(bufs[0]), stderr=bytes(bufs[1]),
                     truncated=seen[0] > cap or seen[1] > cap, killed_by=killed_by,
                     duration_s=time.perf_counter() - t0, cpu_s=0.0)
        result = classify(raw, self.limits)
        if result.killed_reason is None and rc == 137:
            oom = self._oom_kills()
            if oom > self._oom_base:
                self._oom_base = oom
                result.killed_reason = "memory"
        return result

    def read_file(self, rel: str) -> bytes:
        rel = _clean_rel(rel)
        with self._lock:
            self._check_open()
            import docker

            try:
                stream, _ = self._container.get_archive(f"{WORKSPACE}/{rel}")
            except docker.errors.NotFound:
                raise FileNotFoundError(f"no file {rel!r} in the workspace") from None
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.next()
                if member is None or not member.isreg():
                    raise ValueError(f"workspace path {rel!r} is not a regular file")
                f = tar.extractfile(member)
                assert f is not None
                return f.read()

    def write_file(self, rel: str, data: bytes | str) -> None:
        rel = _clean_rel(rel)
        if isinstance(data, str):
            data = data.encode()
        with self._lock:
            self._check_open()
            parent = os.path.dirname(rel)
            if parent:
                self._root(f"mkdir -p '{WORKSPACE}/{parent}' && chown -R 1000:1000 "
                           f"'{WORKSPACE}/{parent.split('/')[0]}'")
            self._container.put_archive(f"{WORKSPACE}/{parent}" if parent else WORKSPACE,
                                        _tar_of({os.path.basename(rel): data}))

    def snapshot(self) -> WorkspaceSnapshot:
        with self._lock:
            self._check_open()
            stream, _ = self._container.get_archive(WORKSPACE)
            return WorkspaceSnapshot(b"".join(stream))

    def restore(self, snap: WorkspaceSnapshot) -> None:
        if not isinstance(snap, WorkspaceSnapshot):
            raise TypeError(f"expected a WorkspaceSnapshot, got {type(snap).__name__}")
        with self._lock:
            self._check_open()
            self._root(f"find {WORKSPACE} -mindepth 1 -delete")
            self._container.put_archive("/", snap.data)

    def reset(self) -> None:
        self.restore(self._initial)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(Exception):
                self._container.remove(force=True)
            for vol in (getattr(self, "_volume", None), getattr(self, "_io_volume", None)):
                if vol is not None:
                    with contextlib.suppress(Exception):
                        vol.remove(force=True)

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
