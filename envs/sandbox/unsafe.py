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
from pathlib import Path

from envs.sandbox.base import SANDBOXES, ExecResult, Limits, SandboxError
from envs.sandbox.folder import FolderSandbox, checked_limits
from envs.sandbox.process import classify, limit_argv, next_disk_floor, run_limited
from envs.sandbox.workspace import Workspace

log = logging.getLogger(__name__)


@SANDBOXES.register("unsafe")
class UnsafeSandbox(FolderSandbox):
    """A workspace folder and plain subprocesses; see the module docstring."""

    backend = "unsafe"

    def __init__(self, source: Path | None = None, limits: Limits | None = None, *,
                 allow_unsafe: bool = False, base_dir: Path | str | None = None) -> None:
        if allow_unsafe is not True:
            raise SandboxError(
                "the 'unsafe' sandbox runs commands directly on the host with no isolation; "
                "open it only with explicit consent: open_sandbox('unsafe', ..., "
                "allow_unsafe=True) (in a config: allow_unsafe: true). Use 'bwrap' otherwise.")
        self.limits = checked_limits(limits)
        self._prefix = limit_argv(self.limits, python=sys.executable)
        self._open(Workspace(Path(source) if source is not None else None, base_dir=base_dir,
                             prefix="trajforge-unsafe-"))
        log.warning("UNSAFE sandbox opened at %s: commands run on the host without isolation",
                    self.workdir)

    def run(self, cmd: str | list[str], *, timeout: float | None = None,
            env: dict[str, str] | None = None, stdin: str | None = None) -> ExecResult:
        argv, t = self._command(cmd, timeout)
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
