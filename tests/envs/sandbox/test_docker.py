"""The docker backend, checked from inside a container: limits, the fallback to one `docker
exec` per command, and the mirrored workspace of a remote daemon (skipped without a daemon)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from envs.sandbox import Limits, open_sandbox
from tests.envs.sandbox.conftest import FAST, healthy


def test_docker_limits_checked_from_inside(docker_ok, tmp_path: Path) -> None:
    lim = Limits(timeout_s=10, memory_mb=300, processes=40, cpu_s=7, open_files=123, file_size_mb=3)
    with open_sandbox("docker", None, lim, cpus=0.5) as sb:
        r = sb.run("cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes "
                   "/sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/cpu.max "
                   "/sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null; "
                   "grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; "
                   "ulimit -t; ulimit -n; ulimit -f; id -u; "
                   "awk '$2 == \"/\" {print $4}' /proc/mounts; touch /root-probe 2>&1; true")
        out = r.stdout
        assert str(300 << 20) in out.split(), out  # memory (v1 limit_in_bytes or v2 memory.max)
        assert "40" in out.split(), out  # pids
        assert "50000 100000" in out or ("50000" in out.split() and "100000" in out.split()), out  # 0.5 CPU
        status = dict(line.split(":\t") for line in out.splitlines() if ":\t" in line)
        assert status["CapEff"] == status["CapBnd"] == status["CapPrm"] == "0000000000000000", status
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
        lines = out.splitlines()
        assert ["7", "123", str(3 * 2048)] == lines[lines.index("7"):lines.index("7") + 3], out  # -f: 512-byte blocks
        assert "1000" in lines and any(line.startswith("ro,") or line == "ro" for line in lines), out
        assert "Read-only file system" in out
        healthy(sb)


def test_docker_without_a_runner_falls_back_to_exec(docker_ok, monkeypatch, caplog) -> None:
    """A runner that cannot start (an image without python3, no ctypes) leaves one
    `docker exec` per command, with the reason logged and kept."""
    import envs.sandbox.docker as dk

    monkeypatch.setattr(dk, "RUNNER_BOOT", "import sys; sys.stderr.write('no runner here'); sys.exit(5)")
    with caplog.at_level(logging.WARNING, logger="envs.sandbox.docker"), open_sandbox("docker", None, FAST) as sb:
        assert sb._runner is None and "no runner here" in (sb.runner_unusable or "")
        assert "one docker exec per command" in caplog.text
        r = sb.run("echo hi; exit 4")
        assert r.returncode == 4 and r.stdout == "hi\n"


def test_docker_mirror_workspace(docker_ok, src: Path) -> None:
    """A remote daemon's workspace: a local mirror pulled after every command (what leaves
    it is skipped), pushed on writes and restores."""
    with open_sandbox("docker", src, FAST, workspace="mirror") as sb:
        assert not str(sb.workdir).startswith("/var/lib/docker")
        assert sb.run("cat README && ./run.sh").stdout == "hello\nran\n"
        sb.write_file("d/new.txt", "x")
        r = sb.run("cat d/new.txt; echo y > made.txt; chmod 000 d; ln -s /etc leak; "
                   "mkdir real && ln -s /tmp real/out && mkfifo pipe")
        assert r.stdout == "x" and sb.read_file("made.txt") == b"y\n", r
        assert (sb.workdir / "leak").is_symlink() and not (sb.workdir / "pipe").exists()
        with pytest.raises(ValueError):
            sb.read_file("leak/passwd")
        snap = sb.snapshot()
        sb.run("rm -rf made.txt; chmod 777 d")
        sb.restore(snap)
        assert sb.run("cat made.txt").stdout == "y\n" and sb.read_file("made.txt") == b"y\n"
        sb.reset()
        assert sorted(os.listdir(sb.workdir)) == ["README", "pkg", "run.sh"]
        assert sb.run("ls").stdout.split() == ["README", "pkg", "run.sh"]
        healthy(sb)
    assert not sb.workdir.exists()
