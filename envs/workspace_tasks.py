"""Where a workspace task starts and how its end is checked: the recipe that builds its
initial folder (`StateRef.patches`), the hash of a workspace folder, and a task's sources
(`TaskSpec`: instruction, files, pytest checks under `TEST_HEADER`, reference steps).

A recipe is one canonical-JSON operation per entry: `{"op": "write", "path", "content",
"executable"}` or `{"op": "run", "cmd"}` (e.g. to build git history). `envs.workspace`
builds recipes in a sandbox and runs the checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.records import ToolCall, canonical_json

SKIP_DIRS = {"__pycache__", ".pytest_cache"}
GIT_KEPT = ("HEAD", "packed-refs")  # plus everything under .git/refs
TEST_HEADER = '''\
"""Checks of one trajforge terminal task (kept outside the agent's workspace)."""
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

# the runner puts these checks in checks_<id>/ beside the workspace copy ws_<id>/
HERE = Path(__file__).resolve().parent
WS = HERE.parent / ("ws_" + HERE.name[len("checks_"):])


def sh(cmd, stdin=None):
    """Run a shell command in the workspace (agent code never runs inside pytest)."""
    return subprocess.run(cmd, shell=True, cwd=WS, input=stdin, capture_output=True, text=True,
                          timeout=20)


def py(*args, stdin=None):
    """Run `python ARGS...` in the workspace."""
    return subprocess.run([sys.executable, "-B", *map(str, args)], cwd=WS, input=stdin,
                          capture_output=True, text=True, timeout=20)


def call(module, function, *args):
    """Call `module.function(*args)` in a fresh interpreter; return its JSON result."""
    code = ("import json, sys; sys.path.insert(0, '.'); import " + module + " as m; "
            "print('@@RESULT@@' + json.dumps(getattr(m, " + repr(function) + ")(*json.loads(sys.argv[1]))))")
    out = py("-c", code, json.dumps(list(args)))
    marker = [ln for ln in out.stdout.splitlines() if ln.startswith("@@RESULT@@")]
    assert marker, f"{module}.{function} returned nothing: {out.stderr[-800:]}"
    return json.loads(marker[-1][len("@@RESULT@@"):])


def read(rel):
    return (WS / rel).read_text()


def rows(rel):
    return list(csv.DictReader(io.StringIO(read(rel))))

'''


# -- recipes and hashing ------------------------------------------------------------------

def recipe(files: dict[str, str], commands: list[str] | None = None,
           executable: list[str] | None = None) -> list[str]:
    """StateRef patches that build a workspace: file writes (sorted), then commands."""
    execs = set(executable or [])
    unknown = execs - set(files)
    if unknown:
        raise ValueError(f"executable files not in the workspace: {sorted(unknown)}")
    for path in files:
        normal_path(path)
    ops = [{"op": "write", "path": p, "content": files[p], "executable": p in execs} for p in sorted(files)]
    ops += [{"op": "run", "cmd": c} for c in commands or []]
    return [canonical_json(op) for op in ops]


def parse_recipe(patches: list[str]) -> list[dict[str, Any]]:
    ops = []
    for i, raw in enumerate(patches):
        try:
            op = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"workspace patch {i} is not JSON: {exc}") from None
        if not isinstance(op, dict) or op.get("op") not in ("write", "run"):
            raise ValueError(f"workspace patch {i} must be an object with op 'write' or 'run'")
        if op["op"] == "write" and not (isinstance(op.get("path"), str) and isinstance(op.get("content"), str)):
            raise ValueError(f"workspace patch {i}: a write needs string 'path' and 'content'")
        if op["op"] == "run" and not isinstance(op.get("cmd"), str):
            raise ValueError(f"workspace patch {i}: a run needs a string 'cmd'")
        ops.append(op)
    return ops


def recipe_files(patches: list[str]) -> dict[str, str]:
    """The files a recipe writes (before its commands run)."""
    return {op["path"]: op["content"] for op in parse_recipe(patches) if op["op"] == "write"}


def _hashed(root: Path) -> list[tuple[str, Path]]:
    """(relative path, path) of every entry that counts toward the workspace hash."""
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        if rel_dir == ".git/":
            # History is captured by the refs (commit ids hash the trees); the index and
            # object files carry timestamps and compression details that vary.
            dirnames[:] = [d for d in dirnames if d == "refs"]
            filenames = [f for f in filenames if f in GIT_KEPT]
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for d in dirnames:
            out.append((rel_dir + d + "/", Path(dirpath) / d))
        for f in sorted(filenames):
            out.append((rel_dir + f, Path(dirpath) / f))
    return sorted(out)


def workspace_hash(root: Path | str) -> str:
    """Hash of a workspace folder: paths, file contents, executable bits, link targets,
    directories; `.git` counts by its HEAD and refs; caches are skipped."""
    h = hashlib.sha256()
    for rel, path in _hashed(Path(root)):
        st_ = path.lstat()
        if stat.S_ISLNK(st_.st_mode):
            entry = f"L {rel} {os.readlink(path)}"
        elif stat.S_ISDIR(st_.st_mode):
            entry = f"D {rel}"
        elif stat.S_ISREG(st_.st_mode):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            entry = f"F {rel} {'x' if st_.st_mode & 0o111 else '-'} {digest}"
        else:
            entry = f"O {rel}"
        h.update(entry.encode() + b"\n")
    return h.hexdigest()[:32]


def read_tree(root: Path | str, max_bytes: int = 1 << 20) -> dict[str, str]:
    """Text of every hashed regular file outside `.git` (for leak checks and reports)."""
    out: dict[str, str] = {}
    for rel, path in _hashed(Path(root)):
        if rel.startswith(".git/") or not path.is_file() or path.is_symlink():
            continue
        out[rel] = path.read_bytes()[:max_bytes].decode("utf-8", "replace")
    return out


def normal_path(rel: str) -> str:
    """A workspace-relative path in normal form, or ValueError if it leaves the workspace."""
    if not isinstance(rel, str) or not rel.strip():
        raise ValueError("path must be a non-empty string")
    if "\x00" in rel:
        raise ValueError("path contains a NUL byte")
    norm = os.path.normpath(rel.strip())
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../"):
        raise ValueError(f"path {rel!r} is outside the workspace")
    return norm


# -- task sources ----------------------------------------------------------------------------

@dataclass
class TaskSpec:
    """One terminal task before validation: what the agent is told, the starting files (and
    setup commands, e.g. git history), pytest checks (TEST_HEADER is prepended) and a
    reference solution of tool calls."""

    name: str
    domain: str  # text | files | data | scripts | git
    instruction: str
    files: dict[str, str]
    tests: str
    solution: list[ToolCall]
    setup: list[str] = field(default_factory=list)
    executable: list[str] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    difficulty: float = 0.3

    def test_files(self) -> dict[str, str]:
        return {"test_task.py": TEST_HEADER + "\n" + self.tests.strip() + "\n"}

    def patches(self) -> list[str]:
        return recipe(self.files, self.setup, self.executable)


def shell(command: str) -> ToolCall:
    """A reference step: `run_shell(command)`."""
    return ToolCall(name="run_shell", arguments={"command": command})


def write(path: str, content: str) -> ToolCall:
    """A reference step: `write_file(path, content)`."""
    return ToolCall(name="write_file", arguments={"path": path, "content": content})


def patch(path: str, old: str, new: str) -> ToolCall:
    """A reference step: `apply_patch(path, old, new)`."""
    return ToolCall(name="apply_patch", arguments={"path": path, "old": old, "new": new})
