"""The Docker backend: one container per sandbox, through the `docker` SDK.

The container idles (`tail -f /dev/null` under Docker's init, as root without any
capability) from `image`: by default `$TRAJFORGE_DOCKER_IMAGE`, else the offline image of
`envs.sandbox.image`, built from this host's files on first use with no registry; any other
image name (pulled if missing, e.g. from a private registry), or one built from `dockerfile`.
Commands run as uid 1000 through the container's runner (`envs.sandbox.docker_runner`: one
attached `exec` per container, a JSON line per command, so a command costs no `docker exec`
round trip), or, where the image has no usable python3 or `exec_server=False`
(`$TRAJFORGE_DOCKER_RUNNER=0`), through one `exec` each. Either way they get:

- a read-only root, the workspace in a named volume at `/workspace`, a `/tmp` and a
  `/dev/shm` tmpfs sized `Limits.disk_mb` and emptied after every command (as bwrap's are);
- no network (`network_mode: none`) unless `Limits.network` (then the host's network, as
  bwrap's `--share-net`);
- the cgroup's memory (`mem_limit`, no swap), process (`pids_limit`) and CPU (`nano_cpus`)
  limits, the rlimits as `ulimits`, all capabilities dropped, no-new-privileges and a seccomp
  profile denying what `envs.sandbox.seccomp` denies (`seccomp=False`: Docker's unconfined);
- a kill at the timeout (the runner's timer, or `timeout -s KILL`), then `kill -9 -1` as
  uid 1000, so no background process outlives its command; a command that kills the runner
  itself is reported lost and the container restarted. Past the timeout plus a grace period, on an output flood or
  when the workspace grows past `Limits.disk_mb`, the container is restarted, which kills
  everything in it (the volume survives).

The workspace is a folder on this host either way (`workdir`), with the same checks as
bwrap's (`envs.sandbox.workspace`): with a local daemon (`workspace="auto"` finds the volume's
mount point on this host, as root) it is the volume itself, and its size is polled while a
command runs; with a remote daemon (`DOCKER_HOST=tcp://...`, `ssh://...`) it is a mirror,
pulled with `get_archive` after every command (members that would leave it are skipped) and
pushed with `put_archive` on writes and restores; the size is then checked on the pull
(a workspace past `Limits.disk_mb` is not pulled: `killed_reason="disk"`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import select
import socket
import stat
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envs.sandbox.base import SANDBOXES, ExecResult, Limits, SandboxError
from envs.sandbox.container import (
    IDLE,
    IMAGE_ENV,
    IO_DIR,
    SANDBOX_USER,
    WORKSPACE,
    WRAPPER,
    clean_rel,
    container_config,
    docker_unusable,
    exec_argv,
    local_folder,
    resolve_image,
    seccomp_profile,
    tar_of,
    tar_of_folder,
)
from envs.sandbox.folder import FolderSandbox
from envs.sandbox.process import MB, OUTPUT_FLOOD_FACTOR, POLL_S, RawRun, classify, next_disk_floor
from envs.sandbox.workspace import Workspace, WorkspaceSnapshot

# re-exported: the container's make-up lives in `envs.sandbox.container`
__all__ = ["GRACE_S", "IDLE", "IMAGE_ENV", "IO_DIR", "RUNNER_BOOT", "RUNNER_ENV", "SANDBOX_USER",
           "WORKSPACE", "WRAPPER", "DockerSandbox", "container_config", "docker_unusable",
           "exec_argv", "seccomp_profile"]

log = logging.getLogger(__name__)

RUNNER_ENV = "TRAJFORGE_DOCKER_RUNNER"  # "0": one `docker exec` per command, no runner
GRACE_S = 5.0  # past timeout + this, the container is restarted


def _close(sock: Any) -> None:
    raw = getattr(sock, "_sock", sock)
    with contextlib.suppress(OSError, AttributeError):
        raw.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


RUNNER_SOURCE = (Path(__file__).with_name("docker_runner.py")).read_text()
RUNNER_START_S = 15.0  # the runner's first line must come within this
# Reads the runner's source (argv[1] bytes) from stdin and runs it as __main__.
RUNNER_BOOT = ("import sys; exec(compile(sys.stdin.buffer.read(int(sys.argv[1])), "
               "'docker_runner', 'exec'))")


class _Runner:
    """The attached exec of `docker_runner.py` in one container: requests go to its stdin,
    answers come back as lines on its stdout frames (see that module)."""

    def __init__(self, sandbox: DockerSandbox) -> None:
        api = sandbox._client.api
        source = RUNNER_SOURCE.encode()
        self.exec_id = api.exec_create(sandbox._container.id, ["python3", "-I", "-c", RUNNER_BOOT, str(len(source))],
                                       stdin=True, stdout=True, stderr=True, workdir=WORKSPACE,
                                       user=SANDBOX_USER)
        self.sock = api.exec_start(self.exec_id, socket=True)
        self.raw = getattr(self.sock, "_sock", self.sock)
        self.raw.sendall(source)  # the runner's code comes on its stdin, not its command line
        self.pending = bytearray()  # stream bytes past the last whole frame
        self.line = bytearray()  # stdout bytes past the last whole answer
        self.stderr = bytearray()  # what the runner itself wrote there (tracebacks)
        self.lost: str | None = None
        try:
            reason, first = self.receive(sandbox, time.perf_counter() + RUNNER_START_S, [])
            if first is None or first.get("ready") is None:
                err = bytes(self.stderr[-400:]).decode(errors="replace").strip()
                raise SandboxError(f"the runner did not start ({reason or 'stream ended'}): "
                                   f"{(first or {}).get('error') or err or 'no output'}")
        except BaseException:
            self.close()
            raise

    def send(self, req: dict[str, Any]) -> None:
        self.raw.sendall(json.dumps(req).encode() + b"\n")

    def receive(self, sandbox: DockerSandbox, deadline: float,
                measured: list[int]) -> tuple[str | None, dict[str, Any] | None]:
        """The next answer line; or (why not, None): "timeout", "disk", None at the end."""

        def frame(i: int, part: bytes) -> bool:
            if i == 1:
                self.stderr += part
                del self.stderr[:-65536]
                return False
            self.line += part
            return b"\n" in self.line

        said = sandbox._pump(self.sock, self.pending, frame, deadline, measured)
        if said != "done":
            self.lost = said or "the runner's stream ended"
            return said, None
        text, _, rest = bytes(self.line).partition(b"\n")
        self.line = bytearray(rest)
        return None, json.loads(text)

    def close(self) -> None:
        _close(self.sock)


@SANDBOXES.register("docker")
class DockerSandbox(FolderSandbox):
    """A container per sandbox; see the module docstring."""

    backend = "docker"

    def __init__(self, source: Path | None = None, limits: Limits | None = None, *,
                 image: str | None = None, dockerfile: Path | str | None = None,
                 cpus: float = 1.0, client: Any = None, seccomp: bool = True,
                 workspace: str = "auto", base_dir: Path | str | None = None,
                 exec_server: bool | None = None) -> None:
        self.limits = limits or Limits()
        if exec_server is None:
            exec_server = os.environ.get(RUNNER_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
        self.exec_server = exec_server
        self._runner: _Runner | None = None
        self.runner_unusable: str | None = None if exec_server else "exec_server=False"
        if image and dockerfile:
            raise ValueError("give `image` or `dockerfile`, not both")
        if workspace not in ("auto", "volume", "mirror"):
            raise ValueError(f"workspace must be auto, volume or mirror, got {workspace!r}")
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
        self._lock = threading.RLock()
        self._closed = False
        self._n = 0
        self._disk_floor = 0
        self._image = resolve_image(self._client, image, dockerfile)
        name = f"trajforge-sbx-{uuid.uuid4().hex[:12]}"
        self._volume = self._client.volumes.create(name=name, labels={"trajforge.sandbox": "1"})
        self._io_volume = self._client.volumes.create(name=name + "-io", labels={"trajforge.sandbox": "1"})
        self._mirror = False
        try:
            cfg = container_config(self.limits, self._image, volume=self._volume.name,
                                   io_volume=self._io_volume.name, cpus=cpus, seccomp=seccomp)
            self._container = self._client.containers.run(name=name, **cfg)
            local = local_folder(self._volume) if workspace != "mirror" else None
            io_local = local_folder(self._io_volume) if local is not None else None
            if workspace == "volume" and (local is None or io_local is None):
                raise SandboxError("workspace='volume' needs the daemon's volumes on this host (as root)")
            src = Path(source) if source is not None else None
            if local is not None and io_local is not None:
                self._ws = Workspace(src, owner=1000, at=local)
                self._io_local: Path | None = io_local
            else:  # a remote daemon: a local mirror of the container's workspace
                self._mirror, self._io_local = True, None
                self._ws = Workspace(src, base_dir=base_dir, prefix="trajforge-docker-mirror-")
                self._push()
            self.workdir = self._ws.path
            self._oom_base = 0  # a new container's cgroup has seen no OOM kill
            self._initial = self._ws.snapshot()
            if exec_server:
                self._start_runner()
        except Exception:
            self.close()
            raise

    def _user(self, cmd: str) -> tuple[int, bytes]:
        """A maintenance command as the sandbox user (the root in here has no capability)."""
        r = self._container.exec_run(["sh", "-c", cmd], user=SANDBOX_USER)
        return r.exit_code, r.output

    def _oom_kills(self) -> int:
        """The cgroup's OOM kill count (v2 `memory.events`, v1 `memory.oom_control`)."""
        _, out = self._user("cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control "
                            "2>/dev/null; true")
        for line in out.decode(errors="replace").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    # -- commands ----------------------------------------------------------------------

    def run(self, cmd: str | list[str], *, timeout: float | None = None,
            env: dict[str, str] | None = None, stdin: str | None = None) -> ExecResult:
        argv, t = self._command(cmd, timeout)
        with self._lock:
            self._check_open()
            stdin_file = None
            if stdin is not None:
                self._n += 1
                name = f"stdin-{self._n}"
                if self._io_local is not None:
                    for old in self._io_local.iterdir():
                        old.unlink()
                    (self._io_local / name).write_bytes(stdin.encode())
                    os.chmod(self._io_local / name, 0o644)
                else:
                    self._container.put_archive(IO_DIR, tar_of({name: stdin.encode()}))
                stdin_file = f"{IO_DIR}/{name}"
            if self._runner is None and self.exec_server and self.runner_unusable is None:
                self._start_runner()  # after a restart
            run = self._exec_runner if self._runner is not None else self._exec
            result = run(argv, t, env, stdin_file)
            if self._mirror and not self._pull() and result.killed_reason is None:
                result.killed_reason = "disk"
            return result

    def _exec(self, argv: list[str], t: float, env: dict[str, str] | None,
              stdin_file: str | None) -> ExecResult:
        """One command through `docker exec` (the shell wrapper does the limits inside)."""
        api = self._client.api
        cap = self.limits.max_output_bytes
        t0 = time.perf_counter()
        exec_id = api.exec_create(self._container.id, exec_argv(argv, t, stdin_file),
                                  stdout=True, stderr=True, workdir=WORKSPACE,
                                  environment=env or {}, user=SANDBOX_USER)
        sock = api.exec_start(exec_id, socket=True)
        bufs = [bytearray(), bytearray()]
        seen = [0, 0]
        measured: list[int] = []

        def frame(i: int, part: bytes) -> str | None:
            seen[i] += len(part)
            bufs[i] += part[:max(0, cap - len(bufs[i]))]
            return "output" if seen[i] > cap * OUTPUT_FLOOD_FACTOR else None

        try:
            killed_by = self._pump(sock, bytearray(), frame, t0 + t + GRACE_S, measured)
        finally:
            _close(sock)  # before any restart: an open stream holds the container up
        if killed_by is not None:
            self._restart()
        rc: Any = None
        if killed_by is None:  # a restarted container has forgotten its execs
            rc = api.exec_inspect(exec_id).get("ExitCode")
        rc = 137 if rc is None else int(rc)
        if killed_by is None and rc == 137 and time.perf_counter() - t0 >= t:
            killed_by = "timeout"  # `timeout -s KILL` fired
        raw = RawRun(returncode=rc, stdout=bytes(bufs[0]), stderr=bytes(bufs[1]),
                     truncated=seen[0] > cap or seen[1] > cap, killed_by=killed_by,
                     duration_s=time.perf_counter() - t0, cpu_s=0.0)
        return self._finish(raw, killed_by, measured)

    def _exec_runner(self, argv: list[str], t: float, env: dict[str, str] | None,
                     stdin_file: str | None) -> ExecResult:
        """One command through the container's runner (`envs.sandbox.docker_runner`)."""
        runner = self._runner
        assert runner is not None
        cap = self.limits.max_output_bytes
        t0 = time.perf_counter()
        nonce = uuid.uuid4().hex
        req = {"id": nonce, "argv": argv, "timeout": t, "env": env or {}, "stdin": stdin_file,
               "cap": cap, "flood": cap * OUTPUT_FLOOD_FACTOR}
        measured: list[int] = []
        answer: dict[str, Any] | None = None
        try:
            runner.send(req)
            killed_by, answer = runner.receive(self, t0 + t + GRACE_S, measured)
        except (OSError, ValueError) as e:  # the stream broke, or an answer that is not ours
            killed_by, answer = None, None
            runner.lost = f"{type(e).__name__}: {e}"
        if answer is not None and answer.get("id") != nonce:
            answer, runner.lost = None, "an answer with another id"
        if answer is None:
            # Timed out here, past the disk quota, or the runner is gone (a command may kill
            # it: same uid): restart the container, which kills whatever was left running.
            why = runner.lost
            self._restart()
            if killed_by is None:
                msg = f"sandbox runner lost ({why}); the container was restarted\n"
                raw = RawRun(returncode=137, stdout=b"", stderr=msg.encode(), truncated=False,
                             killed_by=None, duration_s=time.perf_counter() - t0, cpu_s=0.0)
                return self._finish(raw, None, measured)
            raw = RawRun(returncode=137, stdout=b"", stderr=b"", truncated=False, killed_by=killed_by,
                         duration_s=time.perf_counter() - t0, cpu_s=0.0)
            return self._finish(raw, killed_by, measured)
        seen = [int(n) for n in answer["seen"]]
        raw = RawRun(returncode=int(answer["rc"]), stdout=base64.b64decode(answer["out"]),
                     stderr=base64.b64decode(answer["err"]), truncated=seen[0] > cap or seen[1] > cap,
                     killed_by=answer.get("killed_by"), duration_s=time.perf_counter() - t0,
                     cpu_s=float(answer.get("cpu_s") or 0.0))
        return self._finish(raw, raw.killed_by, measured)

    def _finish(self, raw: RawRun, killed_by: str | None, measured: list[int]) -> ExecResult:
        """Classify `raw`; keep the disk floor; tell an OOM kill from any other SIGKILL."""
        self._disk_floor = next_disk_floor(killed_by, measured[-1] if measured else None,
                                           self._disk_floor, self.limits, self._ws.disk_bytes)
        result = classify(raw, self.limits)
        if result.killed_reason is None and raw.returncode == 137:
            oom = self._oom_kills()
            if oom > self._oom_base:
                self._oom_base = oom
                result.killed_reason = "memory"
        return result

    def _restart(self) -> None:
        """Restart the container: kills every process in it; the volumes stay."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self._container.restart(timeout=0)
        self._oom_base = 0  # and the cgroup starts again

    def _start_runner(self) -> None:
        """Start the container's runner, or fall back to one `docker exec` per command
        (`runner_unusable` says why: no python3 in the image, no ctypes, ...)."""
        try:
            self._runner = _Runner(self)
            self.runner_unusable = None
        except (OSError, SandboxError, ValueError) as e:
            self._runner, self.runner_unusable = None, str(e)
            log.warning("docker sandbox: no runner in %s (%s); one docker exec per command",
                        self._image, e)

    def _pump(self, sock: Any, pending: bytearray, on_frame: Callable[[int, bytes], str | bool | None],
              deadline: float, measured: list[int]) -> str | None:
        """Read the exec's multiplexed stream (8-byte frame headers: stream, size), passing
        each frame to `on_frame` (0 stdout, 1 stderr), until it ends (None), `on_frame`
        returns True ("done") or a reason to stop; "timeout" past `deadline`, "disk" when
        the local workspace is past its size and still growing. Bytes past the last whole
        frame stay in `pending`."""
        raw = getattr(sock, "_sock", sock)
        disk_cap = self.limits.disk_mb * MB if (self.limits.disk_mb and not self._mirror) else None
        last_disk: int | None = None
        next_disk = time.perf_counter() + POLL_S[0]
        while True:
            while len(pending) >= 8:
                kind, size = pending[0], int.from_bytes(pending[4:8], "big")
                if len(pending) < 8 + size:
                    break
                part = bytes(pending[8:8 + size])
                del pending[:8 + size]
                said = on_frame(1 if kind == 2 else 0, part)
                if said is True:
                    return "done"
                if said:
                    return str(said)
            now = time.perf_counter()
            if now >= deadline:
                return "timeout"
            if disk_cap is not None and now >= next_disk:
                used = self._ws.disk_bytes()
                measured.append(used)
                if used > disk_cap and used > (self._disk_floor if last_disk is None else last_disk):
                    return "disk"
                last_disk = used
                spent = time.perf_counter() - now
                next_disk = time.perf_counter() + min(max(10 * spent, POLL_S[0]), POLL_S[1])
            until = min(deadline, next_disk) if disk_cap is not None else deadline
            ready = getattr(raw, "pending", lambda: 0)() or \
                select.select([raw], [], [], max(0.0, until - time.perf_counter()))[0]
            if not ready:
                continue
            try:
                data = raw.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return None  # the daemon closed the stream
            if not data:
                return None
            pending += data

    # -- files -------------------------------------------------------------------------

    def push(self) -> None:
        """Send changes made directly in `workdir` to the container (a mirror only; a local
        volume is the container's workspace already)."""
        with self._lock:
            self._check_open()
            if self._mirror:
                self._push()

    def _push(self) -> None:
        """Make the container's workspace the mirror's (a remote daemon)."""
        mode = stat.S_IMODE(os.lstat(self._ws.path).st_mode)
        self._user(f"chmod -R u+rwx {WORKSPACE} 2>/dev/null; find {WORKSPACE} -mindepth 1 -delete; "
                   f"chmod {mode:o} {WORKSPACE}")
        self._container.put_archive(WORKSPACE, tar_of_folder(self._ws.path))

    def _pull(self) -> bool:
        """Make the mirror the container's workspace; False (mirror unchanged) when the
        workspace is past `Limits.disk_mb`."""
        cap = (self.limits.disk_mb or 1 << 20) * MB * 2  # a tar's headers and padding
        stream, _ = self._container.get_archive(WORKSPACE)
        data = bytearray()
        for chunk in stream:
            data += chunk
            if len(data) > cap:
                return False
        self._ws.load_archive(bytes(data), top="workspace")
        return True

    def write_file(self, rel: str, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode()
        with self._lock:
            self._check_open()
            self._ws.write(rel, data)
            if self._mirror:
                rel = clean_rel(rel)
                parent = os.path.dirname(rel)
                if parent:
                    self._user(f"mkdir -p '{WORKSPACE}/{parent}'")
                self._container.put_archive(f"{WORKSPACE}/{parent}" if parent else WORKSPACE,
                                            tar_of({os.path.basename(rel): data}))

    def restore(self, snap: WorkspaceSnapshot) -> None:
        if not isinstance(snap, WorkspaceSnapshot):
            raise TypeError(f"expected a WorkspaceSnapshot, got {type(snap).__name__}")
        with self._lock:
            self._check_open()
            self._ws.restore(snap)
            if self._mirror:
                self._push()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._runner is not None:
                self._runner.close()
            with contextlib.suppress(Exception):
                self._container.remove(force=True)
            for vol in (getattr(self, "_volume", None), getattr(self, "_io_volume", None)):
                if vol is not None:
                    with contextlib.suppress(Exception):
                        vol.remove(force=True)
            ws = getattr(self, "_ws", None)
            if ws is not None:
                ws.remove()  # the mirror (a volume's folder went with the volume)
