"""Servers this process starts (Prefect's temporary server, `trajforge serve`'s server) stop
when it ends, however it ends.

Prefect stops its temporary server in an `atexit` hook, which a SIGKILL (the OOM killer, a
`kill -9`) skips: the server, a child process, then outlives the run and keeps its memory and
port. `reap_with_this_process(pid)` starts a small reaper process holding the read end of a
pipe whose write end only this process holds. When this process ends, by any means, the
kernel closes the write end, the reaper's read returns, and it stops the server: SIGTERM
(to its process group when it leads one), then SIGKILL after `grace_s`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_lock = threading.Lock()
_reaped: set[tuple[int, str]] = set()  # (pid, start time) of each process guarded
_reapers: list[subprocess.Popen[bytes]] = []
_write_ends: list[int] = []  # held open until this process ends


def _forget_in_child() -> None:
    """A forked child does not hold the write ends: a worker outliving a killed run would
    otherwise keep the server alive."""
    for fd in _write_ends:
        with suppress(OSError):
            os.close(fd)
    _write_ends.clear()
    _reaped.clear()
    _reapers.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first); None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22), which
    tells it from a later process given the same pid; None when it is gone (or no /proc)."""
    fields = _stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def _reap(fd: int, pid: int, started: str, grace_s: float) -> None:
    """The reaper: wait for the end of file on `fd` (the process that started the server is
    gone), then stop `pid` if it is still that process (not a zombie, not a reused pid)."""
    while os.read(fd, 1):
        pass

    def alive() -> bool:
        fields = _stat(pid)
        return bool(fields) and fields[0] != "Z" and start_time(pid) == started

    def send(sig: int) -> None:
        with suppress(OSError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)

    if alive():
        send(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive():
            send(signal.SIGKILL)


def reap_with_this_process(pid: int, grace_s: float = 5.0) -> bool:
    """Stop process `pid` (its group, when it leads one) once this process has ended. Once per
    process; False when it is gone or there is no /proc to tell it apart by."""
    started = start_time(pid)
    with _lock:
        if started is None or (pid, started) in _reaped:
            return False
        read_end, write_end = os.pipe()  # both non-inheritable: a child that execs holds neither
        try:
            _reapers.append(subprocess.Popen(
                [sys.executable, "-m", "pipelines.reaper", str(read_end), str(pid), started, str(grace_s)],
                pass_fds=(read_end,), start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        _reaped.add((pid, started))
        _write_ends.append(write_end)
    return True


def reap_temporary_prefect_servers() -> list[int]:
    """`reap_with_this_process` for each temporary Prefect server this process runs (Prefect
    starts one on the first flow when no PREFECT_API_URL is set); the pids newly guarded."""
    server = sys.modules.get("prefect.server.api.server")
    if server is None:  # no temporary server in this process
        return []
    instances = getattr(getattr(server, "SubprocessASGIServer", None), "_instances", None)
    if not isinstance(instances, dict):
        log.warning("prefect.server.api.server.SubprocessASGIServer._instances is gone (a Prefect upgrade?): "
                    "a killed run may leave its temporary server running")
        return []
    guarded = []
    for instance in list(instances.values()):
        proc = getattr(instance, "server_process", None)
        with suppress(Exception):
            if proc is not None and proc.poll() is None and reap_with_this_process(proc.pid):
                guarded.append(proc.pid)
    return guarded


def _reap_servers_hook(flow: Any, flow_run: Any, state: Any) -> None:
    reap_temporary_prefect_servers()


def on_running_hooks() -> list[Any]:
    """A flow's `on_running` hooks (a new list a flow: Prefect keeps and extends it): by the
    time a flow runs, the temporary server has started."""
    return [_reap_servers_hook]


if __name__ == "__main__":  # the reaper process: FD PID START_TIME GRACE_S
    _reap(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
