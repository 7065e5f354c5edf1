"""The sandbox contract (`envs.sandbox.base`): `Limits` checks its values, `ExecResult.ok`,
and `open_sandbox` finds a backend by name and hands it the source, limits and options."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.sandbox import SANDBOXES, ExecResult, Limits, SandboxError, open_sandbox


def test_limits_reject_what_is_not_positive() -> None:
    for name in ("timeout_s", "cpu_s", "memory_mb", "file_size_mb", "open_files", "processes",
                 "max_output_bytes"):
        with pytest.raises(ValueError, match=f"Limits.{name} must be > 0"):
            Limits(**{name: 0})
    with pytest.raises(ValueError, match="disk_mb"):
        Limits(disk_mb=0)
    assert Limits(disk_mb=None).disk_mb is None  # unchecked
    lim = Limits()
    assert not lim.network and lim.memory_mb == 1024 and lim.timeout_s == 30.0
    with pytest.raises(AttributeError):
        lim.network = True  # type: ignore[misc]  # frozen


def test_exec_result_ok_needs_exit_zero_and_no_timeout() -> None:
    assert ExecResult(0, "out", "", 0.1).ok
    assert not ExecResult(1, "", "err", 0.1).ok
    assert not ExecResult(0, "", "", 5.0, timed_out=True, killed_reason="timeout").ok


def test_open_sandbox_finds_the_backend_and_passes_everything_on(tmp_path: Path) -> None:
    assert {"bwrap", "docker", "unsafe"} <= set(SANDBOXES.names())
    with pytest.raises(KeyError, match="sandbox backend"):
        open_sandbox("nope")
    (tmp_path / "a.txt").write_text("A")
    lim = Limits(timeout_s=5, cpu_s=5)
    with open_sandbox("unsafe", str(tmp_path), lim, allow_unsafe=True) as sb:
        assert sb.backend == "unsafe" and sb.limits is lim
        assert sb.read_file("a.txt") == b"A" and sb.workdir != tmp_path
    with pytest.raises(SandboxError):  # an option the backend needs, or refuses
        open_sandbox("unsafe", None, lim)
