"""A sandbox's host workspace folder (`envs.sandbox.workspace.Workspace`): paths, files,
snapshots, and pulling an untrusted archive into it."""

from __future__ import annotations

import os
from pathlib import Path


def test_mirror_pull_skips_what_leaves_the_workspace(tmp_path: Path) -> None:
    """A remote container's workspace archive is untrusted: absolute names, `..`, writes
    through a link, hard links out, devices are skipped; links stay links."""
    import io
    import tarfile

    from envs.sandbox.workspace import Workspace

    outside = tmp_path / "outside"
    outside.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", link: str = "", mode: int = 0o644):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode, info.size = kind, link, mode, len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
        add("workspace", tarfile.DIRTYPE, mode=0o750)
        add("workspace/ok.txt", data=b"fine")
        add("workspace/run.sh", data=b"#!/bin/sh\n", mode=0o4755)
        add("workspace/../escape.txt")
        add(f"workspace/{outside}/abs.txt")
        add("/abs.txt")
        add("workspace/link", tarfile.SYMTYPE, link=str(outside))
        add("workspace/link/through.txt")
        add("workspace/hard", tarfile.LNKTYPE, link=str(outside / "x"))
        add("workspace/dev", tarfile.CHRTYPE)
        add("other/file.txt")
    ws = Workspace(None, base_dir=tmp_path / "ws")
    ws.write("old.txt", "gone after the pull")
    ws.load_archive(buf.getvalue())
    assert sorted(os.listdir(ws.path)) == ["link", "ok.txt", "run.sh"]
    assert ws.read("ok.txt") == b"fine" and (ws.path / "link").is_symlink()
    assert os.stat(ws.path / "run.sh").st_mode & 0o7777 == 0o755  # no setuid
    assert os.stat(ws.path).st_mode & 0o777 == 0o750
    assert os.listdir(outside) == [] and not (tmp_path / "escape.txt").exists()
    assert not Path("/abs.txt").exists()
    ws.remove()
