"""SIGTERM a running CLI process and see how it ends, for the interruption tests
(tests/pipelines/test_sigterm.py, tests/train/test_interrupt.py)."""

from __future__ import annotations

import signal
import subprocess
import time


def terminate(proc: subprocess.Popen[str], timeout_s: float = 60) -> tuple[int, str, float]:
    """Send SIGTERM to `proc` and wait for it: its exit code, its stderr and the seconds it
    took to end (a process still running after `timeout_s` is killed, and the wait raises).
    A process that already ended is left as it is (its exit code, no stderr read)."""
    if proc.poll() is not None:
        return proc.returncode, "", 0.0
    try:
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, err, time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
