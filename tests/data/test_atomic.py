"""Atomic writes: the target is the old file or the new one, never a torn one, and no
temporary file is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.atomic import atomic_open, write_atomic, write_json_atomic


def test_writes_replace_the_target_and_leave_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    write_atomic(target, "first")
    write_atomic(target, "café ✓")
    assert target.read_text(encoding="utf-8") == "café ✓"
    write_atomic(target, b"\x00\xff", fsync=False)
    assert target.read_bytes() == b"\x00\xff"
    write_json_atomic(tmp_path / "a.json", {"when": Path("x"), "n": 1})  # non-JSON values as str
    assert (tmp_path / "a.json").read_text() == '{"when": "x", "n": 1}'
    write_json_atomic(tmp_path / "b.json", [1], indent=2)
    assert (tmp_path / "b.json").read_text() == "[\n  1\n]\n" and json.loads((tmp_path / "b.json").read_text()) == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "out.txt"]


def test_an_error_mid_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="killed"), atomic_open(target) as f:
        f.write("half of the new")
        assert target.read_text() == "old"  # nothing reaches the target before the block ends
        raise RuntimeError("killed")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["state.json"]
    with pytest.raises(TypeError), atomic_open(tmp_path / "never.json") as f:
        f.write(b"bytes to a text file")
    assert not (tmp_path / "never.json").exists() and [p.name for p in tmp_path.iterdir()] == ["state.json"]
