"""Run one command under limits: rlimits in the child, a wall clock, capped output.

Shared by the bwrap and unsafe backends. The limits are set by a tiny exec wrapper placed in
front of the command (`prlimit` from util-linux, else a `python3 -c` wrapper calling
`resource.setrlimit`): it runs inside the sandbox, after bubblewrap has created the user
namespace, so RLIMIT_NPROC counts the sandbox's own processes rather than every sandbox of
the same uid, and no `preexec_fn` runs in a threaded parent.

Exit codes follow the shell: a command killed by signal N returns 128 + N.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envs.sandbox.base import ExecResult, Limits, SandboxError

MB = 1 << 20
OUTPUT_FLOOD_FACTOR = 8  # a stream past this many times max_output_bytes gets the command killed
POLL_S = (0.05, 1.0)  # the workspace size is checked every 10x its measuring time, in this range
# The process limit (RLIMIT_NPROC, or a pids cgroup) makes fork/clone fail with EAGAIN: shells
# say "Cannot fork" / "fork: retry", Python raises BlockingIOError from os.fork or cannot
# start a thread.
_PROCESSES_RE = re.compile(
    rb"Cannot fork|can't fork|fork: (?:retry: )?Resource temporarily unavailable|fork failed"
    rb"|fork\w*\([^\n]*\n(?:[ \t^~]+\n)?BlockingIOError|can't start new thread"
    rb"|pthread_create failed|Resource temporarily unavailable[^\n]{0,40}(?:fork|clone|spawn)",
    re.IGNORECASE)
_MEMORY_RE = re.compile(
    rb"MemoryError|Cannot allocate memory|memory exhausted|out of memory|std::bad_alloc"
    rb"|failed to allocate|mmap failed|Killed process", re.IGNORECASE)

_PY_WRAPPER = (
    "import os,resource as r,sys\n"
    "for k,s,h in (('AS',{as_},{as_}),('CPU',{cpu},{cpu_h}),('FSIZE',{fsize},{fsize}),"
    "('NOFILE',{nofile},{nofile}),('NPROC',{nproc},{nproc}),('CORE',0,0)):\n"
    " r.setrlimit(getattr(r,'RLIMIT_'+k),(s,h))\n"
    "os.execvp(sys.argv[1],sys.argv[1:])\n")


def limit_argv(limits: Limits, *, visible: Callable[[str], bool] = lambda p: True,
               python: str | None = None, memory_bytes: int | None = None) -> list[str]:
    """The wrapper that applies `limits` to the command placed after it.

    `visible(path)` says whether a host binary can be run where the command runs (inside a
    sandbox only the bound system folders are); `python` is the fallback interpreter;
    `memory_bytes` is RLIMIT_AS when not all of `limits.memory_mb` (the bwrap sandbox keeps
    part of it for its tmpfs mounts).
    """
    as_ = limits.memory_mb * MB if memory_bytes is None else memory_bytes
    fsize = limits.file_size_mb * MB
    prlimit = shutil.which("prlimit")
    if prlimit and visible(prlimit):
        return [prlimit, f"--as={as_}:{as_}", f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
                f"--fsize={fsize}:{fsize}", f"--nofile={limits.open_files}:{limits.open_files}",
                f"--nproc={limits.processes}:{limits.processes}", "--core=0:0", "--"]
    for py in (python, shutil.which("python3")):
        if py and visible(py):
            code = _PY_WRAPPER.format(as_=as_, cpu=limits.cpu_s, cpu_h=limits.cpu_s + 1,
                                      fsize=fsize, nofile=limits.open_files,
                                      nproc=limits.processes)
            return [py, "-S", "-I", "-c", code]
    raise SandboxError("applying limits needs `prlimit` (util-linux) or python3 on the system")


def command_argv(cmd: str | list[str]) -> list[str]:
    """A shell string runs under `sh -c`; a list runs as is."""
    if isinstance(cmd, str):
        if not cmd.strip():
            raise ValueError("empty command")
        return ["/bin/sh", "-c", cmd]
    if not cmd or not all(isinstance(a, str) for a in cmd):
        raise ValueError(f"command must be a non-empty string or list of strings, got {cmd!r}")
    return list(cmd)


@dataclass
class RawRun:
    """What `run_limited` saw, before classification."""

    returncode: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    killed_by: str | None  # "timeout", "output", "disk": we killed it
    duration_s: float
    cpu_s: float  # user + system CPU of the command and its reaped descendants
    disk_bytes: int | None = None  # the workspace size last measured while it ran


def run_limited(argv: Sequence[str], *, timeout: float, limits: Limits, cwd: str,
                env: dict[str, str] | None, stdin: str | None,
                popen_kw: dict | None = None,
                disk_usage: Callable[[], int] | None = None, disk_floor: int = 0) -> RawRun:
    """Run `argv` in a new process group; kill the group at the deadline, on an output
    flood or when `disk_usage()` is past `limits.disk_mb` and still growing (above the
    previous measure, or `disk_floor` at first: a workspace left over its quota by an
    earlier command can still be cleaned up)."""
    cap = limits.max_output_bytes
    flood = cap * OUTPUT_FLOOD_FACTOR
    disk_cap = limits.disk_mb * MB if (limits.disk_mb and disk_usage) else None
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=env, start_new_session=True, close_fds=True,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **(popen_kw or {}))
    except OSError as e:
        raise SandboxError(f"could not start {argv[0]!r}: {e}") from e
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    in_fd = proc.stdin.fileno() if proc.stdin is not None else -1
    bufs: dict[int, bytearray] = {}
    seen: dict[int, int] = {}
    killed_by: str | None = None

    def kill(reason: str) -> None:
        nonlocal killed_by
        if killed_by is None:
            killed_by = reason
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        assert f is not None
        os.set_blocking(f.fileno(), False)
        sel.register(f.fileno(), selectors.EVENT_READ)
        bufs[f.fileno()] = bytearray()
        seen[f.fileno()] = 0
    pending = stdin.encode() if stdin is not None else b""
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        if pending:
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
    deadline = t0 + timeout
    next_disk = t0 + POLL_S[0]
    drain_until: float | None = None
    disk_bytes: int | None = None
    while sel.get_map():
        now = time.perf_counter()
        if killed_by is None and now >= deadline:
            kill("timeout")
        if killed_by is not None:
            drain_until = drain_until or now + 1.0
            if now >= drain_until:  # a writer escaped the group: stop waiting for EOF
                break
        if disk_cap is not None and killed_by is None and now >= next_disk:
            used = disk_usage()  # type: ignore[misc]
            if used > disk_cap and used > (disk_floor if disk_bytes is None else disk_bytes):
                kill("disk")
            disk_bytes = used
            spent = time.perf_counter() - now
            next_disk = now + min(max(10 * spent, POLL_S[0]), POLL_S[1])
        wait = min(deadline, next_disk, drain_until or deadline) - now
        for key, _ in sel.select(max(0.0, wait) if killed_by is None else 0.05):
            fd = key.fd
            if fd == in_fd:
                try:
                    n = os.write(fd, pending[:65536])
                    pending = pending[n:]
                except (BrokenPipeError, BlockingIOError) as e:
                    if isinstance(e, BrokenPipeError):
                        pending = b""
                if not pending:
                    sel.unregister(fd)
                    proc.stdin.close()
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(fd)
                continue
            seen[fd] += len(chunk)
            room = cap - len(bufs[fd])
            if room > 0:
                bufs[fd] += chunk[:room]
            if seen[fd] > flood and killed_by is None:
                kill("output")
    sel.close()
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    # Pipes are closed: wait for the exit, still under the deadline.
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.perf_counter()
        if killed_by is None and now >= deadline:
            kill("timeout")
        wait = 0.05 if killed_by is not None else max(0.0, deadline - now)
        if pidfd is not None:
            select.select([pidfd], [], [], wait)
        else:
            time.sleep(min(wait, 0.005))
    if pidfd is not None:
        os.close(pidfd)
    proc.returncode = os.waitstatus_to_exitcode(status)
    for f in (proc.stdout, proc.stderr):
        assert f is not None
        f.close()
    rc = proc.returncode
    if rc < 0:
        rc = 128 - rc
    return RawRun(
        returncode=rc, stdout=bytes(bufs[out_fd]), stderr=bytes(bufs[err_fd]),
        truncated=any(seen[fd] > cap for fd in seen), killed_by=killed_by,
        duration_s=time.perf_counter() - t0,
        cpu_s=rusage.ru_utime + rusage.ru_stime, disk_bytes=disk_bytes)


def next_disk_floor(killed_by: str | None, last_measured: int | None, floor: int, limits: Limits,
                    measure: Callable[[], int]) -> int:
    """The workspace size the next command may not grow past while the workspace stays over
    `Limits.disk_mb` (so a command can still clean it up): its size after a command killed
    for disk, the last size measured during a command that left it over the limit, 0 once
    a measure finds it under, and unchanged when the command was too short to measure."""
    cap = (limits.disk_mb or 0) * MB
    if killed_by == "disk":
        return measure()
    if last_measured is None:
        return floor
    return last_measured if cap and last_measured > cap else 0


def classify(raw: RawRun, limits: Limits) -> ExecResult:
    """An `ExecResult` with the reason the command died, where it can be told."""
    reason = raw.killed_by
    rc = raw.returncode
    sig = rc - 128 if rc > 128 else None
    if reason is None:
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and raw.cpu_s >= limits.cpu_s - 0.5):
            reason = "cpu"
        elif sig == signal.SIGXFSZ:
            reason = "file_size"
        elif _PROCESSES_RE.search(raw.stderr[-65536:]):
            reason = "processes"  # fork failed at the process limit (the command may exit 0)
        elif rc != 0 and _MEMORY_RE.search(raw.stderr[-4096:]):
            reason = "memory"
    return ExecResult(
        returncode=rc, stdout=raw.stdout.decode(errors="replace"),
        stderr=raw.stderr.decode(errors="replace"), duration_s=raw.duration_s,
        timed_out=raw.killed_by == "timeout", killed_reason=reason, truncated=raw.truncated)
