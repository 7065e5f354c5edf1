"""The bubblewrap backend: its argv (mounts, namespaces, limits), its tmpfs mounts counted
against `Limits.memory_mb`, a clear error without bwrap, and the sandbox init it protects."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from envs.sandbox import Limits, SandboxError, open_sandbox
from envs.sandbox.bwrap import BwrapSandbox, bwrap_argv
from envs.sandbox.process import MB, limit_argv
from tests.envs.sandbox.conftest import FAST, healthy, needs_bwrap, needs_py, python_probe

# Fill /tmp and then /dev/shm with 30 MB files (under the 64 MB file size limit) until a
# write fails; report what each holds and hold it a moment so the host can measure it.
FILL = """st=0
for d in /tmp /dev/shm; do
  i=0
  while [ $i -lt 8 ]; do
    i=$((i+1))
    dd if=/dev/zero of=$d/f$i bs=1M count=30 2>>/workspace/dd.err || { st=1; break; }
  done
done
cat /workspace/dd.err >&2
du -sk /tmp /dev/shm
sleep 0.3
exit $st
"""


def shmem_kb() -> int:
    """Host RAM held by tmpfs files (and other shared memory), from /proc/meminfo."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1])
    raise AssertionError("no Shmem line in /proc/meminfo")


def tmpfs_sizes(argv: list[str]) -> dict[str, int]:
    return {argv[i + 3]: int(argv[i + 1]) for i, a in enumerate(argv)
            if a == "--size" and argv[i + 2] == "--tmpfs"}


def test_tmpfs_sizes_come_out_of_the_memory_limit() -> None:
    for lim in (Limits(memory_mb=64), Limits(memory_mb=1024), Limits(memory_mb=1024, disk_mb=64),
                Limits(memory_mb=200, disk_mb=None)):
        sizes = tmpfs_sizes(bwrap_argv(Path("/tmp/ws"), lim))
        assert set(sizes) == {"/tmp", "/dev/shm"}
        assert sum(sizes.values()) <= lim.memory_mb * MB // 2, (lim, sizes)
        assert sizes["/tmp"] <= (lim.disk_mb or lim.memory_mb) * MB and sizes["/dev/shm"] > 0


@needs_bwrap
def test_tmpfs_writes_past_the_memory_limit_fail_and_hold_no_more_host_ram() -> None:
    lim = Limits(timeout_s=30, memory_mb=64)
    with BwrapSandbox(None, lim) as sb:
        base = shmem_kb()
        peak = [base]
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], shmem_kb())
                time.sleep(0.01)

        t = threading.Thread(target=poll)
        t.start()
        try:
            r = sb.run(FILL)
        finally:
            stop.set()
            t.join()
        # 480 MB was asked for; the command errors (ENOSPC) instead of holding it.
        assert r.returncode != 0 and r.stderr.count("No space left on device") == 2, r
        held_kb = sum(int(line.split()[0]) for line in r.stdout.splitlines())
        assert held_kb <= 64 * 1024, r.stdout
        assert (peak[0] - base) <= 64 * 1024, f"host tmpfs RAM grew {(peak[0] - base) >> 10} MB"
        assert sb.run("du -sk /tmp").stdout.split()[0] == "0"  # the tmpfs went with it
        # What is left of the 64 MB for processes still runs python; 64 MB more does not fit.
        r = sb.run(["/usr/bin/python3", "-c", "x = bytearray(8 << 20); print('ok')"])
        assert r.stdout == "ok\n", r
        r = sb.run(["/usr/bin/python3", "-c", "x = bytearray(64 << 20)"])
        assert r.killed_reason == "memory", r


def test_limits_and_argv_are_checked() -> None:
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=0)
    with pytest.raises(ValueError, match="disk_mb"):
        Limits(disk_mb=-1)
    with pytest.raises(KeyError, match="sandbox backend"):
        open_sandbox("nope")
    lim = Limits(memory_mb=100, cpu_s=3, processes=7, network=False)
    wrap = " ".join(limit_argv(lim))
    assert "--nproc=7:7" in wrap or "('NPROC',7,7)" in wrap
    argv = bwrap_argv(Path("/tmp/ws"), lim, env={"A": "1"})
    assert "--share-net" not in argv and "--unshare-all" in argv and "--die-with-parent" in argv
    assert argv[argv.index("--bind") + 1:argv.index("--bind") + 3] == ["/tmp/ws", "/workspace"]
    bound = [argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    assert "/" not in bound and not any(b.startswith(("/root", "/home", "/work")) for b in bound)
    assert argv[argv.index("--remount-ro") + 1] == "/"
    assert "--share-net" in bwrap_argv(Path("/tmp/ws"), Limits(network=True))
    with pytest.raises(ValueError):
        bwrap_argv(Path("/tmp/ws"), lim, env={"A=B": "1"})


def test_bwrap_missing_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(SandboxError, match="apt-get install -y bubblewrap"):
        BwrapSandbox(None, FAST)


@needs_bwrap
@needs_py
def test_probe_ptrace_of_the_sandbox_init() -> None:
    """The attack the filter stops: attach to the sandbox's own init (pid 1) and leave it
    stopped, which wedged the command until its timeout."""
    attack = ("import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno(), flush=True)\n")
    lim = Limits(timeout_s=4, cpu_s=10)
    with open_sandbox("bwrap", None, lim) as sb:
        t0 = time.perf_counter()
        r = python_probe(sb, attack)
        assert r.ok and r.stdout.split() == ["-1", "1"], r  # EPERM
        assert time.perf_counter() - t0 < 3
        healthy(sb)
    with open_sandbox("bwrap", None, lim, seccomp=False) as off:  # control: it wedges
        r = python_probe(off, attack)
        assert r.timed_out and r.stdout.split()[:1] == ["0"], r
