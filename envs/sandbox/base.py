"""The sandbox contract shared by every backend.

A sandbox owns one private writable workspace (a host folder, `workdir`) that commands see
as their working directory. Everything else is read-only or absent, the network is off
unless `Limits.network` says otherwise, and each command runs under the limits below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from data.registry import Registry


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, backend missing), not the command in it."""


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to every command run in a sandbox."""

    timeout_s: float = 30.0  # wall clock per command; the process group is killed past it
    cpu_s: int = 30  # RLIMIT_CPU
    # RLIMIT_AS; bwrap: /tmp and /dev/shm (RAM) get half of it, RLIMIT_AS the rest
    # (`bwrap.memory_split`); docker: the container's memory cgroup
    memory_mb: int = 1024
    file_size_mb: int = 64  # RLIMIT_FSIZE
    open_files: int = 256  # RLIMIT_NOFILE
    processes: int = 64  # max processes (bwrap: dropped uid + RLIMIT_NPROC; docker: pids-limit)
    network: bool = False
    max_output_bytes: int = 1 << 20  # stdout/stderr kept per stream; the rest is cut
    disk_mb: int | None = 1024  # workspace size (and /tmp's, at most); None: unchecked

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s", "memory_mb", "file_size_mb", "open_files", "processes",
                     "max_output_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.disk_mb is not None and self.disk_mb <= 0:
            raise ValueError(f"Limits.disk_mb must be > 0 or None, got {self.disk_mb!r}")


@dataclass
class ExecResult:
    """What one command did."""

    returncode: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    # "timeout", "memory", "cpu", "file_size", "output", "disk", or "processes" (a fork failed
    # at the process limit; the command itself may still exit 0)
    killed_reason: str | None = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class Sandbox(Protocol):
    """One isolated workspace. Use as a context manager or call `close()`."""

    backend: str
    workdir: Path  # host path of the writable workspace
    limits: Limits

    def run(self, cmd: str | list[str], *, timeout: float | None = None,
            env: dict[str, str] | None = None, stdin: str | None = None) -> ExecResult:
        """Run `cmd` (a shell string runs under `sh -c`) in the workspace."""
        ...

    def read_file(self, rel: str) -> bytes: ...

    def write_file(self, rel: str, data: bytes | str) -> None: ...

    def snapshot(self) -> Any:
        """An opaque snapshot of the workspace that `restore` puts back exactly."""
        ...

    def restore(self, snap: Any) -> None: ...

    def reset(self) -> None:
        """Back to the workspace as it was when the sandbox was opened."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...


# factory(source, limits, **options): options are backend-specific keywords (bwrap:
# `ro_binds`, `base_dir`; docker: `image`, `dockerfile`; unsafe: `allow_unsafe`).
SandboxFactory = Callable[..., Sandbox]
SANDBOXES: Registry[SandboxFactory] = Registry(
    "sandbox backend", ["envs.sandbox.bwrap", "envs.sandbox.docker", "envs.sandbox.unsafe"])


def open_sandbox(backend: str = "bwrap", source: Path | str | None = None,
                 limits: Limits | None = None, **options: Any) -> Sandbox:
    """Open a sandbox whose workspace starts as a copy of `source` (a folder) or empty.

    `options` go to the backend; "unsafe" refuses to open without `allow_unsafe=True`.
    """
    factory = SANDBOXES.get(backend)
    return factory(Path(source) if source is not None else None, limits or Limits(), **options)
