"""Workspace recipes, hashing and task sources (`envs.workspace_tasks`): a recipe is canonical
JSON, a workspace hash sees contents, modes, links and git refs but not caches, and paths may
not leave the workspace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envs.workspace_tasks import (
    TEST_HEADER,
    TaskSpec,
    normal_path,
    parse_recipe,
    patch,
    read_tree,
    recipe,
    recipe_files,
    shell,
    workspace_hash,
    write,
)


def test_recipes_are_sorted_writes_then_commands() -> None:
    patches = recipe({"b.sh": "echo b\n", "a.txt": "A"}, ["git init -q"], executable=["b.sh"])
    ops = parse_recipe(patches)
    assert [op.get("path") or op["cmd"] for op in ops] == ["a.txt", "b.sh", "git init -q"]
    assert ops[1] == {"op": "write", "path": "b.sh", "content": "echo b\n", "executable": True}
    assert patches == recipe({"a.txt": "A", "b.sh": "echo b\n"}, ["git init -q"], executable=["b.sh"])
    assert recipe_files(patches) == {"a.txt": "A", "b.sh": "echo b\n"}
    with pytest.raises(ValueError, match="executable files not in the workspace"):
        recipe({"a": ""}, executable=["b"])
    with pytest.raises(ValueError, match="outside the workspace"):
        recipe({"../a": ""})
    for bad, why in (("not json", "not JSON"), (json.dumps({"op": "rm"}), "op 'write' or 'run'"),
                     (json.dumps({"op": "write", "path": "a"}), "string 'path' and 'content'"),
                     (json.dumps({"op": "run"}), "string 'cmd'")):
        with pytest.raises(ValueError, match=why):
            parse_recipe([bad])


def test_workspace_hash(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A")
    (tmp_path / "d").mkdir()
    h0 = workspace_hash(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"cache")
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "index").write_bytes(b"timestamps")
    (git / "objects").mkdir()
    h1 = workspace_hash(tmp_path)
    assert h1 != h0  # .git itself is an entry ...
    (git / "index").write_bytes(b"other timestamps")
    (git / "objects" / "pack").write_bytes(b"x")
    assert workspace_hash(tmp_path) == h1  # ... but its index and objects are not
    (git / "refs" / "heads" / "main").write_text("abc\n")
    h2 = workspace_hash(tmp_path)
    assert h2 != h1  # a ref is
    os.chmod(tmp_path / "a.txt", 0o755)
    h3 = workspace_hash(tmp_path)
    assert h3 != h2  # the executable bit counts
    os.symlink("a.txt", tmp_path / "link")
    assert workspace_hash(tmp_path) != h3 and len(h3) == 32
    assert read_tree(tmp_path) == {"a.txt": "A"}  # text of regular files outside .git


def test_normal_path() -> None:
    assert normal_path(" d/./e/../f.txt ") == "d/f.txt"
    for bad in ("", "   ", "..", "../x", "/abs", "a\x00b"):
        with pytest.raises(ValueError):
            normal_path(bad)


def test_task_spec_and_reference_steps() -> None:
    spec = TaskSpec(name="t", domain="text", instruction="Sort it.", files={"a.txt": "b\na\n"},
                    tests="def test_sorted():\n    assert read('a.txt') == 'a\\nb\\n'\n",
                    solution=[shell("sort -o a.txt a.txt")], executable=[])
    (name, body), = spec.test_files().items()
    assert name == "test_task.py" and body.startswith(TEST_HEADER) and body.endswith("'a\\nb\\n'\n")
    assert spec.patches() == recipe({"a.txt": "b\na\n"})
    assert shell("ls").model_dump()["arguments"] == {"command": "ls"}
    assert write("f", "x").name == "write_file" and patch("f", "a", "b").arguments == {"path": "f", "old": "a",
                                                                                      "new": "b"}
    compile(TEST_HEADER, "header", "exec")  # the checks' helpers are valid Python
