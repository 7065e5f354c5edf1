"""The "unsafe" backend: a plain subprocess in a private folder, for development only.

It isolates nothing: the command sees the whole host (files, network, other processes) as
the calling user. It keeps the rlimits, the wall clock (the process group is killed, though
a command that leaves its session escapes) and the output cap of `Limits`;
RLIMIT_NPROC has no effect when the caller is root and `Limits.network` is not enforced.

It opens only with explicit consent, given in code or configuration, never implied:

    open_sandbox("unsafe", source, limits, allow_unsafe=True)

(a config selecting this backend must also set `allow_unsafe: true` and pass it on).
Each open logs a warning.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from pathlib import Path

from envs.sandbox.base import SANDBOXES, ExecResult, Limits, SandboxError
from envs.sandbox.process import classify, command_argv, limit_argv, next_disk_floor, run_limited
from envs.sandbox.workspace import Workspace, WorkspaceSnapshot

log = logging.getLogger(__name__)


@SANDBOXES.register("unsafe")
class UnsafeSandbox:
    """A workspace folder and plain subprocesses; see the module docstring."""

    backend = "unsafe"

    def __init__(self, source: Path | None = None, limits: Limits | None = None, *,
                 allow_unsafe: bool = False, base_dir: Path | str | None = None) -> None:
        if allow_unsafe is not True:
            raise SandboxError(
                "the 'unsafe' sandbox runs commands directly on the host with no isolation; "
                "open it only with explicit consent: open_sandbox('unsafe', ..., "
                "allow_unsafe=True) (in a config: allow_unsafe: true). Use 'bwrap' otherwise.")
        self.limits = limits or Limits()
        if not isinstance(self.limits, Limits):
            raise TypeError(f"limits must be a Limits, got {type(self.limits).__name__}")
        self._prefix = limit_argv(self.limits, python=sys.executable)
        self._ws = Workspace(Path(source) if source is not None else None, base_dir=base_dir,
                             prefix="trajforge-unsafe-")
        self._finalizer = weakref.finalize(self, self._ws.remove)
        self.workdir = self._ws.path
        self._lock = threading.RLock()
        self._closed = False
        self._disk_floor = 0
        self._initial = self._ws.snapshot()
        log.warning("UNSAFE sandbox opened at %s: commands run on the host without isolation",
                    self.workdir)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed")

    def run(self, cmd: str | list[str], *, timeout: float | None = None,
            env: dict[str, str] | None = None, stdin: str | None = None) -> ExecResult:
        argv = command_argv(cmd)
        t = self.limits.timeout_s if timeout is None else timeout
        if not t > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        base_env = {k: v for k, v in os.environ.items()
                    if k in ("PATH", "LANG", "LC_ALL", "TERM", "USER", "LOGNAME")}
        full_env = {**base_env, "HOME": str(self.workdir), "PWD": str(self.workdir),
                    **(env or {})}
        with self._lock:
            self._check_open()
            raw = run_limited(self._prefix + argv, timeout=t, limits=self.limits,
                              cwd=str(self.workdir), env=full_env, stdin=stdin,
                              disk_usage=self._ws.disk_bytes, disk_floor=self._disk_floor)
            self._disk_floor = next_disk_floor(raw.killed_by, raw.disk_bytes, self._disk_floor,
                                                self.limits, self._ws.disk_bytes)
        return classify(raw, self.limits)

    def read_file(self, rel: str) -> bytes:
        with self._lock:
            self._check_open()
            return self._ws.read(rel)

    def write_file(self, rel: str, data: bytes | str) -> None:
        with self._lock:
            self._check_open()
            self._ws.write(rel, data)

    def snapshot(self) -> WorkspaceSnapshot:
        with self._lock:
            self._check_open()
            return self._ws.snapshot()

    def restore(self, snap: WorkspaceSnapshot) -> None:
        with self._lock:
            self._check_open()
            self._ws.restore(snap)

    def reset(self) -> None:
        self.restore(self._initial)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> UnsafeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
