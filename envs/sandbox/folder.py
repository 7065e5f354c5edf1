"""What the sandbox backends share: a workspace folder on this host (`Workspace`) behind one
lock, with its files, snapshots and reset, the open/closed state, and the checks on a
command's arguments.

A backend adds how a command runs (`run`) and, where the workspace has a second copy (a
remote Docker daemon's container), how writes, restores and closing reach it.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import Self

from envs.sandbox.base import Limits, SandboxError
from envs.sandbox.process import command_argv
from envs.sandbox.workspace import Workspace, WorkspaceSnapshot


def checked_limits(limits: Limits | None) -> Limits:
    """`limits`, or the defaults; TypeError for anything that is not a `Limits`."""
    limits = limits or Limits()
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
    return limits


class FolderSandbox:
    """The shared part of a sandbox (see the module docstring); calls are serialized by
    `_lock`. Subclasses set `limits` and open their workspace with `_open` (or set `_ws`,
    `workdir`, `_lock`, `_closed`, `_disk_floor` and `_initial` themselves)."""

    backend: str
    limits: Limits
    workdir: Path
    _ws: Workspace
    _lock: threading.RLock
    _closed: bool
    _disk_floor: int
    _initial: WorkspaceSnapshot

    def _open(self, ws: Workspace) -> None:
        """Take `ws` as the workspace (removed on `close` or when the sandbox is collected)
        and keep its first state for `reset`."""
        self._ws = ws
        self._finalizer = weakref.finalize(self, ws.remove)
        self.workdir = ws.path
        self._lock = threading.RLock()
        self._closed = False
        self._disk_floor = 0
        self._initial = ws.snapshot()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("sandbox is closed")

    def _command(self, cmd: str | list[str], timeout: float | None) -> tuple[list[str], float]:
        """The argv of `cmd` (a shell string runs under `sh -c`) and its timeout in seconds."""
        argv = command_argv(cmd)
        t = self.limits.timeout_s if timeout is None else timeout
        if not t > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        return argv, t

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
        """Back to the workspace as it was when the sandbox was opened."""
        self.restore(self._initial)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
