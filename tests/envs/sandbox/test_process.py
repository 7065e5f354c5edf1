"""Running one limited command (`envs.sandbox.process`): the limits wrapper, a command's
argv, the kill reasons it reports and the disk floor carried between commands."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from envs.sandbox import Limits
from envs.sandbox.process import (
    MB,
    RawRun,
    classify,
    command_argv,
    limit_argv,
    next_disk_floor,
    run_limited,
)

FAST = Limits(timeout_s=5, cpu_s=5)


def raw(rc: int = 0, stderr: bytes = b"", killed_by: str | None = None, cpu_s: float = 0.0) -> RawRun:
    return RawRun(rc, b"out", stderr, False, killed_by, 0.1, cpu_s)


def test_command_argv() -> None:
    assert command_argv("echo $HOME") == ["/bin/sh", "-c", "echo $HOME"]
    assert command_argv(["a", "b c"]) == ["a", "b c"]
    for bad in ("", "   ", [], ["ok", 1]):
        with pytest.raises(ValueError):
            command_argv(bad)  # type: ignore[arg-type]


def test_limit_argv_applies_every_limit() -> None:
    lim = Limits(memory_mb=100, cpu_s=3, file_size_mb=2, open_files=50, processes=7)
    argv = limit_argv(lim)
    text = " ".join(argv)
    if "prlimit" in argv[0]:
        assert argv[-1] == "--" and f"--as={100 * MB}:{100 * MB}" in argv and "--cpu=3:4" in argv
        assert "--nproc=7:7" in argv and "--nofile=50:50" in argv and f"--fsize={2 * MB}:{2 * MB}" in argv
    else:
        assert "('NPROC',7,7)" in text and "('CPU',3,4)" in text
    assert f"{5 * MB}" in " ".join(limit_argv(lim, memory_bytes=5 * MB)) and f"{100 * MB}" in text
    # without a visible prlimit the python fallback sets the same rlimits
    py = limit_argv(lim, visible=lambda p: "prlimit" not in p, python=sys.executable)
    assert py[:4] == [sys.executable, "-S", "-I", "-c"] and "('NOFILE',50,50)" in py[4]


def test_classify_names_the_reason() -> None:
    assert classify(raw(), FAST).killed_reason is None and classify(raw(), FAST).stdout == "out"
    assert classify(raw(128 + signal.SIGXCPU), FAST).killed_reason == "cpu"
    assert classify(raw(128 + signal.SIGKILL, cpu_s=4.8), FAST).killed_reason == "cpu"  # at the hard limit
    assert classify(raw(128 + signal.SIGKILL, cpu_s=0.1), FAST).killed_reason is None  # killed by itself
    assert classify(raw(128 + signal.SIGXFSZ), FAST).killed_reason == "file_size"
    assert classify(raw(0, b"sh: 1: Cannot fork\n"), FAST).killed_reason == "processes"
    assert classify(raw(1, b"Traceback ...\nMemoryError\n"), FAST).killed_reason == "memory"
    assert classify(raw(0, b"MemoryError handled\n"), FAST).killed_reason is None  # it exited 0
    timed = classify(raw(137, killed_by="timeout"), FAST)
    assert timed.timed_out and timed.killed_reason == "timeout" and not timed.ok


def test_next_disk_floor() -> None:
    lim = Limits(disk_mb=1)

    def measure() -> int:
        return 3 * MB

    assert next_disk_floor("disk", None, 0, lim, measure) == 3 * MB  # killed for disk: its size now
    assert next_disk_floor(None, None, 123, lim, measure) == 123  # too short to measure: unchanged
    assert next_disk_floor(None, 2 * MB, 0, lim, measure) == 2 * MB  # left it over the limit
    assert next_disk_floor(None, MB // 2, 2 * MB, lim, measure) == 0  # under again


def test_run_limited_times_out_and_caps_output(tmp_path) -> None:
    r = run_limited(["/bin/sh", "-c", "echo hi; cat"], timeout=5, limits=FAST, cwd=str(tmp_path),
                    env={"PATH": os.environ["PATH"]}, stdin="piped")
    assert (r.returncode, r.stdout, r.killed_by) == (0, b"hi\npiped", None)
    r = run_limited(["sleep", "10"], timeout=0.3, limits=FAST, cwd=str(tmp_path), env=None, stdin=None)
    assert r.killed_by == "timeout" and r.duration_s < 3
    small = Limits(timeout_s=5, max_output_bytes=100)
    r = run_limited(["/bin/sh", "-c", "head -c 300 /dev/zero"], timeout=5, limits=small, cwd=str(tmp_path),
                    env=None, stdin=None)
    assert r.truncated and len(r.stdout) == 100 and r.killed_by is None
    r = run_limited(["yes"], timeout=5, limits=small, cwd=str(tmp_path), env=None, stdin=None)
    assert r.killed_by == "output"  # past 8x the cap: killed, not read forever
