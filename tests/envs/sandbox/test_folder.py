"""What every folder-backed sandbox shares (`envs.sandbox.folder`): the limits check, a
command's argv and timeout, files, snapshots and reset, and the closed state."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.sandbox import Limits, SandboxError
from envs.sandbox.folder import FolderSandbox, checked_limits
from envs.sandbox.workspace import Workspace


class Bare(FolderSandbox):
    """A FolderSandbox that runs nothing: only the shared part."""

    backend = "bare"

    def __init__(self, source: Path | None, limits: Limits | None = None) -> None:
        self.limits = checked_limits(limits)
        self._open(Workspace(source))


def test_checked_limits() -> None:
    assert checked_limits(None) == Limits()
    lim = Limits(timeout_s=3)
    assert checked_limits(lim) is lim
    with pytest.raises(TypeError, match="limits must be a Limits"):
        checked_limits({"timeout_s": 3})  # type: ignore[arg-type]


def test_command_argv_and_timeout() -> None:
    with Bare(None, Limits(timeout_s=7)) as sb:
        assert sb._command("echo hi", None) == (["/bin/sh", "-c", "echo hi"], 7)
        assert sb._command(["ls", "-l"], 2.5) == (["ls", "-l"], 2.5)
        for bad in (0, -1):
            with pytest.raises(ValueError, match="timeout"):
                sb._command("true", bad)


def test_files_snapshot_reset_and_close(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("v0")
    sb = Bare(tmp_path)
    sb.write_file("keep.txt", "v1")
    sb.write_file("d/new.txt", b"new")
    snap = sb.snapshot()
    sb.write_file("keep.txt", "v2")
    sb.restore(snap)
    assert sb.read_file("keep.txt") == b"v1" and sb.read_file("d/new.txt") == b"new"
    sb.reset()  # as opened: the source's copy
    assert sb.read_file("keep.txt") == b"v0" and not (sb.workdir / "d").exists()
    assert (tmp_path / "keep.txt").read_text() == "v0"  # the source is never written
    workdir = sb.workdir
    sb.close()
    assert not workdir.exists()
    for call in (lambda: sb.read_file("keep.txt"), lambda: sb.write_file("x", "y"), sb.snapshot):
        with pytest.raises(SandboxError, match="closed"):
            call()
