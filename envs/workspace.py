"""Workspace worlds: the state is a folder of files in a sandbox, the tools are a shell and
file operations, and tasks are checked by pytest files kept outside the agent's workspace.

A workspace world is a folder with `workspace.yaml` (`kind: workspace`, sandbox backend and
limits), `policy.md` (the system prompt) and `seeds.py` (task seeds and skills for
synthesis). A task's initial workspace is a recipe in `StateRef.patches`: one canonical-JSON
operation per entry, `{"op": "write", "path", "content", "executable"}` or `{"op": "run",
"cmd"}` (e.g. to build git history), and `StateRef.state_hash` is the hash of the folder the
recipe builds (`workspace_hash`; recipes, hashing and `TaskSpec` are in
`envs.workspace_tasks`). Tool results are `envs.calls.Observation`s: a command that exits
non-zero is reported (`exit_code`), not an error; errors are `timeout`,
`path_outside_workspace`, `bad_arguments`, `unknown_tool`, `tool_error` and `env_error`.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import tempfile
import threading
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from data.records import StateRef
from envs.calls import Observation, ToolEnv
from envs.calls import error_observation as _error
from envs.loader import load_module
from envs.sandbox import Limits, Sandbox, SandboxError, open_sandbox
from envs.tools import ToolError, ToolSpec, build_spec, tool
from envs.workspace_tasks import (
    GIT_KEPT,
    SKIP_DIRS,
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

# re-exported: recipes, hashing and task sources live in `envs.workspace_tasks`
__all__ = ["FIXED_NOW", "GIT_DATE", "GIT_KEPT", "RUNNER", "SANDBOX_ROOT", "SKIP_DIRS", "TEST_HEADER",
           "TOOLS", "WORKSPACE_FILE", "Settings", "TaskSpec", "TestReport", "WorkspaceEnv",
           "WorkspaceWorld", "is_workspace_world", "parse_recipe", "patch", "pytest_paths",
           "read_tree", "recipe", "recipe_files", "shell", "workspace_hash", "write"]

WORKSPACE_FILE = "workspace.yaml"
# A fixed clock: commits made in the workspace (by a recipe or by the agent) get the same
# hashes on every run, so a replayed workspace hashes like the one seen during rollout.
FIXED_NOW = "2025-01-06T09:00:00+00:00"
GIT_DATE = "2025-01-06T09:00:00 +0000"
SANDBOX_ROOT = "/workspace"  # where the bwrap and docker backends mount the workspace

# -- the world -----------------------------------------------------------------------------

@dataclass
class Settings:
    """`workspace.yaml`: how commands and tests run."""

    sandbox: str = "bwrap"
    sandbox_options: dict[str, Any] = field(default_factory=dict)  # backend keywords (open_sandbox)
    limits: Limits = field(default_factory=Limits)
    test_timeout_s: float = 60.0
    python: str = "python3"  # the sandbox's interpreter for tests (pytest is bound in read-only)
    max_output_chars: int = 6000
    max_list_entries: int = 300

    @staticmethod
    def load(path: Path) -> Settings:
        raw = yaml.safe_load(path.read_text()) or {}
        if raw.pop("kind", None) != "workspace":
            raise ValueError(f"{path}: expected 'kind: workspace'")
        limits = Limits(**raw.pop("limits", {}) or {})
        known = {"sandbox", "sandbox_options", "test_timeout_s", "python", "max_output_chars", "max_list_entries"}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
        return Settings(limits=limits, **raw)


PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")


def pytest_paths() -> tuple[str, list[str]]:
    """(site folder, module paths) of this process's pytest and its dependencies: bound
    read-only into test sandboxes, so tests need no pytest installed in the sandbox's system."""
    paths: list[str] = []
    site = ""
    for name in PYTEST_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            if name == "py":
                continue
            raise SandboxError(f"pytest dependency {name!r} is not importable here")
        origin = Path(spec.origin)
        path = origin.parent if origin.name == "__init__.py" else origin
        paths.append(str(path))
        if name == "pytest":
            site = str(path.parent)
    return site, paths


RUNNER = ("import sys; sys.path.append(sys.argv.pop(1)); import pytest; "
          "raise SystemExit(pytest.main(sys.argv[1:]))")


def is_workspace_world(folder: Path) -> bool:
    return (folder / WORKSPACE_FILE).exists()




@dataclass
class TestReport:
    """Outcome of one pytest run: per test id, "passed", "failed", "error" or "skipped"."""

    outcomes: dict[str, str]
    returncode: int
    ok: bool  # pytest ran and wrote its report (not whether tests passed)
    detail: str = ""
    duration_s: float = 0.0

    def passed(self, test_id: str) -> bool:
        return self.outcomes.get(test_id) == "passed"


@dataclass
class WorkspaceWorld:
    """A world whose state is a workspace folder (see the module docstring)."""

    name: str
    folder: Path
    settings: Settings = field(default_factory=Settings)
    backend: str | None = None  # overrides settings.sandbox (tests, other machines)
    _cache: dict[str, Path] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    kind = "workspace"

    @staticmethod
    def load(name: str, folder: Path) -> WorkspaceWorld:
        return WorkspaceWorld(name=name, folder=folder, settings=Settings.load(folder / WORKSPACE_FILE))

    @cached_property
    def policy(self) -> str:
        return (self.folder / "policy.md").read_text()

    @cached_property
    def seeds(self) -> ModuleType:
        """Task seeds and skills for synthesis (`seeds.py`)."""
        return load_module(self.folder / "seeds.py", self.name)

    @cached_property
    def tools(self) -> dict[str, ToolSpec]:
        return {s.name: s for s in (build_spec(f) for f in TOOLS)}

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    def compiled_rules(self) -> list[str]:
        return []

    def synthetic_values(self, ref: StateRef) -> frozenset[str]:
        """The text this world generated for a task whose initial workspace is `ref`: the
        files its recipe writes and the commands it runs, the policy and the tool schemas
        (release hygiene leaves the e-mail addresses and phone numbers in them alone)."""
        files = recipe_files(ref.patches) if ref.patches else {}
        return frozenset({*files.values(), *ref.patches, self.policy, json.dumps(self.tool_schemas(), ensure_ascii=False)})

    def system_prompt(self, now: str) -> str:
        return self.policy.strip().replace("{now}", now)

    @property
    def sandbox_backend(self) -> str:
        return self.backend or os.environ.get("TRAJFORGE_SANDBOX") or self.settings.sandbox

    def open_sandbox(self, source: Path | None = None, limits: Limits | None = None,
                     for_tests: bool = False) -> Sandbox:
        options = dict(self.settings.sandbox_options)
        if for_tests and self.sandbox_backend == "bwrap":
            options["ro_binds"] = [*options.get("ro_binds", []), *pytest_paths()[1]]
        return open_sandbox(self.sandbox_backend, source, limits or self.settings.limits, **options)

    def command_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of every command: a fixed clock for git, no bytecode files, C locale."""
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
            "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "dev",
            "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_AUTHOR_DATE": GIT_DATE,
            "GIT_COMMITTER_DATE": GIT_DATE, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
        }
        env.update(extra or {})
        return env

    # initial workspaces

    def build(self, ref: StateRef) -> Path:
        """A host folder holding `ref`'s workspace (built once per recipe, then shared;
        callers copy it, never change it)."""
        if ref.world != self.name:
            raise ValueError(f"state of world {ref.world!r} given to world {self.name!r}")
        key = hashlib.sha256("\n".join(ref.patches).encode()).hexdigest()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached.exists():
                built = cached
            else:
                built = self._build(ref.patches)
                self._cache[key] = built
        got = workspace_hash(built)
        if got != ref.state_hash:
            raise ValueError(f"workspace recipe builds state {got}, not {ref.state_hash}")
        return built

    def _build(self, patches: list[str]) -> Path:
        ops = parse_recipe(patches)
        with self.open_sandbox() as sb:
            unsynced = False
            for op in ops:
                if op["op"] == "write":
                    rel = normal_path(op["path"])
                    sb.write_file(rel, op["content"])
                    if op.get("executable"):
                        p = sb.workdir / rel
                        p.chmod(p.stat().st_mode | 0o111)
                        unsynced = True
                else:
                    if unsynced and callable(getattr(sb, "push", None)):
                        sb.push()  # modes changed in the host folder (a remote Docker daemon's mirror)
                    unsynced = False
                    res = sb.run(op["cmd"], env=self.command_env())
                    if not res.ok:
                        raise ValueError(f"workspace recipe command failed ({res.returncode}): {op['cmd']!r}: "
                                         f"{(res.stderr or res.stdout)[-500:]}")
            dest = Path(tempfile.mkdtemp(prefix=f"trajforge-{self.name}-base-"))
            atexit.register(shutil.rmtree, dest, True)  # built workspaces live as long as the process
            shutil.rmtree(dest)
            shutil.copytree(sb.workdir, dest, symlinks=True)
        return dest

    def state_ref(self, patches: list[str], seed: int = 0) -> StateRef:
        """Build a recipe once and return its reference (with the hash it produces)."""
        built = self._build(patches)
        ref = StateRef(world=self.name, seed=seed, scale=0, patches=list(patches), state_hash=workspace_hash(built))
        key = hashlib.sha256("\n".join(patches).encode()).hexdigest()
        with self._lock:
            self._cache[key] = built
        return ref

    def env(self, ref: StateRef | None = None, conn: Any = None) -> WorkspaceEnv:
        """A live workspace: a fresh sandbox holding a copy of `ref`'s workspace."""
        if conn is not None:
            raise ValueError("a workspace world has no database connection")
        if ref is None:
            raise ValueError("env() needs a state reference")
        return WorkspaceEnv(self, self.open_sandbox(self.build(ref)))

    # running tests

    def run_tests(self, workspace: Path, tests: dict[str, str]) -> TestReport:
        """Run a task's own test files against a copy of `workspace` in a fresh sandbox."""
        return self.run_tests_batch([(workspace, tests)])[0]

    def run_tests_batch(self, jobs: list[tuple[Path, dict[str, str]]]) -> list[TestReport]:
        """Run each job's test files against a copy of its workspace, all in one fresh
        sandbox and one pytest process (pytest's start-up dominates a small task's checks).

        Only the given files are collected, from a folder beside each workspace copy, with an
        explicit ini file and rootdir, `--noconftest`, no plugin autoloading and no cache, in
        an isolated interpreter (`-I`: no cwd or PYTHON* variables on the path). The tests run
        workspace code in subprocesses (see TEST_HEADER), so nothing the agent wrote executes
        inside pytest. Outcomes come from the JUnit report; a test absent from it failed.
        """
        if not jobs:
            return []
        for _, tests in jobs:
            if not tests:
                raise ValueError("a test job needs at least one test file")
            for name in tests:
                if "/" in name or not (name.startswith("test_") and name.endswith(".py")):
                    raise ValueError(f"test file names must be test_*.py without folders, got {name!r}")
        nonce = uuid.uuid4().hex[:12]
        report = f"report_{nonce}.xml"
        stage = Path(tempfile.mkdtemp(prefix="trajforge-tests-"))
        paths: list[str] = []
        try:
            for i, (workspace, tests) in enumerate(jobs):
                shutil.copytree(workspace, stage / f"ws_{nonce}_{i}", symlinks=True)
                (stage / f"checks_{nonce}_{i}").mkdir()
                for name, body in sorted(tests.items()):
                    (stage / f"checks_{nonce}_{i}" / name).write_text(body)
                    paths.append(f"checks_{nonce}_{i}/{name}")
            (stage / f"pytest_{nonce}.ini").write_text("[pytest]\naddopts =\n")
            timeout = self.settings.test_timeout_s * (1 + 0.25 * (len(jobs) - 1))
            limits = Limits(**{**self.settings.limits.__dict__, "timeout_s": timeout, "cpu_s": int(timeout)})
            with self.open_sandbox(stage, limits, for_tests=True) as sb:
                args = [self.settings.python, "-I", "-B", "-c", RUNNER, pytest_paths()[0],
                        "-c", f"pytest_{nonce}.ini", "--rootdir=.", "--import-mode=importlib", "--noconftest",
                        "-p", "no:cacheprovider", "-q", "-rN", "--tb=short", f"--junitxml={report}", *paths]
                cmd = "exec " + shlex.join(args)
                res = sb.run(cmd, env=self.command_env({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}))
                try:  # read_file refuses a link or FIFO planted by code under test
                    xml = sb.read_file(report)
                except (OSError, ValueError, SandboxError):
                    xml = b""
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        tail = (res.stdout[-1500:] + res.stderr[-1500:]).strip()
        problem = ""
        outcomes: dict[str, dict[str, str]] = {}
        if res.timed_out:
            problem = f"tests timed out: {tail}"
        elif not xml:
            problem = f"pytest wrote no report: {tail}"
        else:
            try:
                outcomes = _junit_outcomes(xml)
            except ET.ParseError as exc:
                problem = f"unreadable test report: {exc}"
        ok = not problem and res.returncode in (0, 1)
        return [TestReport(outcomes.get(f"checks_{nonce}_{i}", {}), res.returncode, ok, problem or tail,
                           res.duration_s) for i in range(len(jobs))]


def _junit_outcomes(xml: bytes) -> dict[str, dict[str, str]]:
    """Outcomes by checks folder, then by test id ("test_x.py::[Class::]name")."""
    root = ET.fromstring(xml[: 4 << 20])
    out: dict[str, dict[str, str]] = {}
    for case in root.iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        if len(parts) < 2:
            continue  # a collection error: its tests are absent, so they count as failed
        folder, module, classes = parts[0], parts[1], parts[2:]
        test_id = "::".join([module + ".py", *classes, case.get("name") or ""])
        tags = {child.tag for child in case}
        outcome = ("error" if "error" in tags else "failed" if "failure" in tags
                   else "skipped" if "skipped" in tags else "passed")
        seen = out.setdefault(folder, {})
        if seen.get(test_id, "passed") == "passed":  # a teardown error after a pass still counts
            seen[test_id] = outcome
    return out


# -- the live environment --------------------------------------------------------------------

class WorkspaceEnv(ToolEnv):
    """One live workspace in a sandbox; tools act on it."""

    def __init__(self, world: WorkspaceWorld, sandbox: Sandbox) -> None:
        self.world = world
        self.sandbox = sandbox

    @property
    def root(self) -> Path:
        return self.sandbox.workdir

    def now(self) -> str:
        return FIXED_NOW

    def state_hash(self) -> str:
        return workspace_hash(self.root)

    def close(self) -> None:
        self.sandbox.close()

    def __enter__(self) -> WorkspaceEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def resolve(self, rel: str) -> str:
        """`rel` as a normalized workspace path; ToolError if it (or a link on the way) leaves it.
        Absolute paths are accepted inside the workspace as the host or the sandbox names it."""
        raw = rel.strip() if isinstance(rel, str) else rel
        if isinstance(raw, str) and os.path.isabs(raw):
            for root in (str(self.root), SANDBOX_ROOT):
                if raw == root or raw.startswith(root.rstrip("/") + "/"):
                    raw = os.path.relpath(raw, root)
                    break
        try:
            norm = normal_path(raw)
        except ValueError as exc:
            raise ToolError("path_outside_workspace", str(exc)) from None
        real_root = os.path.realpath(self.root)
        real = os.path.realpath(os.path.join(real_root, norm))
        if real != real_root and not real.startswith(real_root + os.sep):
            raise ToolError("path_outside_workspace", f"path {rel!r} resolves outside the workspace")
        return norm

    def _execute(self, spec: ToolSpec, args: dict[str, Any]) -> Observation:
        try:
            result = spec.fn(self, **args)
        except ToolError as exc:
            kind = exc.code if exc.code in ("timeout", "path_outside_workspace", "bad_arguments") else "tool_error"
            return _error(kind, exc.code, exc.message)
        except SandboxError as exc:
            return _error("env_error", "sandbox", str(exc))
        except OSError as exc:
            return _error("tool_error", type(exc).__name__, str(exc))
        return Observation(content=json.dumps(result, ensure_ascii=False), wrote=spec.write)

    def _clip(self, text: str) -> str:
        limit = self.world.settings.max_output_chars
        if len(text) <= limit:
            return text
        return text[: limit // 2] + f"\n... [{len(text) - limit} characters cut] ...\n" + text[-limit // 2:]


# -- tools -------------------------------------------------------------------------------------

@tool(write=True)
def run_shell(env: WorkspaceEnv, command: str) -> dict:
    """Run a shell command (sh -c) in the workspace folder and return its exit code and output.
    A non-zero exit code is reported, not treated as an error.

    Args:
        command: The command line, e.g. "ls -la && python3 script.py".
    """
    if not command.strip():
        raise ToolError("bad_arguments", "command is empty")
    res = env.sandbox.run(command, env=env.world.command_env())
    if res.timed_out:
        raise ToolError("timeout", f"command timed out after {env.sandbox.limits.timeout_s:g}s and was killed")
    out: dict[str, Any] = {"exit_code": res.returncode, "stdout": env._clip(res.stdout),
                           "stderr": env._clip(res.stderr)}
    if res.killed_reason:
        out["killed"] = res.killed_reason
    if res.truncated:
        out["truncated"] = True
    return out


@tool()
def read_file(env: WorkspaceEnv, path: str) -> dict:
    """Read a text file from the workspace.

    Args:
        path: Path relative to the workspace, e.g. "src/app.py".
    """
    rel = env.resolve(path)
    target = env.root / rel
    if target.is_dir():
        raise ToolError("is_a_directory", f"{rel} is a directory; use list_files")
    if not target.exists():
        raise ToolError("not_found", f"no file {rel}")
    data = env.sandbox.read_file(rel)
    return {"path": rel, "content": env._clip(data.decode("utf-8", "replace"))}


@tool(write=True)
def write_file(env: WorkspaceEnv, path: str, content: str) -> dict:
    """Create or overwrite a text file in the workspace (parent folders are created).

    Args:
        path: Path relative to the workspace, e.g. "out/report.txt".
        content: The complete new content of the file.
    """
    rel = env.resolve(path)
    if (env.root / rel).is_dir():
        raise ToolError("is_a_directory", f"{rel} is a directory")
    env.sandbox.write_file(rel, content)
    return {"path": rel, "bytes": len(content.encode())}


@tool(write=True)
def apply_patch(env: WorkspaceEnv, path: str, old: str, new: str) -> dict:
    """Replace one exact occurrence of `old` with `new` in a workspace file.

    Args:
        path: Path relative to the workspace.
        old: The exact text to replace; it must occur exactly once in the file.
        new: The replacement text.
    """
    rel = env.resolve(path)
    target = env.root / rel
    if not target.is_file():
        raise ToolError("not_found", f"no file {rel}")
    if not old:
        raise ToolError("bad_arguments", "old must not be empty")
    text = env.sandbox.read_file(rel).decode("utf-8", "replace")
    count = text.count(old)
    if count != 1:
        raise ToolError("patch_mismatch", f"old text occurs {count} times in {rel}; it must occur exactly once")
    env.sandbox.write_file(rel, text.replace(old, new, 1))
    return {"path": rel, "replaced": 1}


@tool()
def list_files(env: WorkspaceEnv, path: str = ".") -> dict:
    """List the files under a workspace folder (recursively; folders end with "/").

    Args:
        path: Folder relative to the workspace (default: the whole workspace).
    """
    rel = env.resolve(path)
    base = env.root / rel
    if not base.is_dir():
        raise ToolError("not_found", f"no folder {rel}")
    entries: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        shown = []
        for d in sorted(dirnames):
            if d == ".git" or d in SKIP_DIRS:
                entries.append(os.path.relpath(os.path.join(dirpath, d), env.root) + "/")
            else:
                shown.append(d)
        dirnames[:] = shown
        entries += [os.path.relpath(os.path.join(dirpath, d), env.root) + "/" for d in shown]
        entries += [os.path.relpath(os.path.join(dirpath, f), env.root) for f in sorted(filenames)]
    entries.sort()
    limit = env.world.settings.max_list_entries
    out: dict[str, Any] = {"path": rel, "entries": entries[:limit]}
    if len(entries) > limit:
        out["more"] = len(entries) - limit
    return out


TOOLS = [run_shell, read_file, write_file, apply_patch, list_files]
