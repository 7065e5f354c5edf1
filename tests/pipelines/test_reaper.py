"""A server this process started stops when the process is killed with SIGKILL
(`pipelines.reaper`): a plain process group, and Prefect's temporary server under a real flow
(slow), each in a helper process that the test kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipelines.reaper import reap_with_this_process, start_time

pytestmark = pytest.mark.timeout(180)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed child of a dead parent may wait to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_running(p) for p in pids)


def _helper(code: str, log: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """A python process running `code`, which prints pids on one line, then waits (its stderr
    goes to `log`: a pipe nobody reads could fill and block it)."""
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, stderr=err,
                                text=True, env={k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"})
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.strip():
        proc.kill()
        proc.wait()
        raise AssertionError(f"the helper printed no pids: {log.read_text()[-3000:]}")
    return proc, [int(x) for x in line.split()]


def test_a_killed_process_takes_the_group_it_guards_down(tmp_path: Path) -> None:
    """A forked child of the killed process (a pool worker) lives on; the group still stops."""
    proc, pids = _helper("""
        import os, subprocess, sys, time
        from pipelines.reaper import reap_with_this_process
        group = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                                 start_new_session=True)
        child = int(group.stdout.readline())
        assert reap_with_this_process(group.pid) and not reap_with_this_process(group.pid)  # once a process
        worker = os.fork()
        if worker == 0:
            time.sleep(300)
            os._exit(0)
        print(group.pid, child, worker, flush=True)
        time.sleep(300)
    """, tmp_path / "helper.log")
    *guarded, worker = pids
    try:
        assert all(_running(p) for p in pids)
        time.sleep(0.5)
        assert all(_running(p) for p in guarded), "the guard stopped the group while its process lived"
        proc.send_signal(signal.SIGKILL)  # no atexit, no finally
        proc.wait()
        assert _gone_within(guarded, 15), "the group outlived the process that guarded it"
        assert _running(worker)
    finally:
        for p in pids:
            if _running(p):
                os.kill(p, signal.SIGKILL)


def test_a_process_that_is_gone_is_not_guarded() -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    assert start_time(done.pid) is None and not reap_with_this_process(done.pid)
    assert start_time(os.getpid())  # this process has one


@pytest.mark.slow  # Prefect's temporary server starts in the helper (~10-20 s)
def test_prefects_temporary_server_stops_when_the_run_is_killed(tmp_path: Path) -> None:
    proc, pids = _helper(f"""
        import time
        from pipelines import flows
        from pipelines.config import load_config
        from prefect.server.api.server import SubprocessASGIServer

        cfg = load_config(None, {{"synthesis.n_tasks": 1}})
        flows.synth_flow(cfg.model_dump(mode="json"), {str(tmp_path / "out")!r})
        print(*[s.server_process.pid for s in SubprocessASGIServer._instances.values()], flush=True)
        time.sleep(300)
    """, tmp_path / "helper.log")
    try:
        assert pids and all(_running(p) for p in pids)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert _gone_within(pids, 20), "Prefect's temporary server outlived the killed run"
    finally:
        for p in pids:
            if _running(p):
                os.kill(p, signal.SIGKILL)
