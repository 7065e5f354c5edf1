"""Workspace worlds (`envs.workspace`), on the unsafe backend (no isolation needed for what is
checked here): settings from workspace.yaml, the live workspace's paths and output limits,
and pytest's JUnit report read into outcomes. (The tools in a real sandbox are tested in
tests/synthesis/test_terminal.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from data.records import ToolCall
from envs import workspace as ws
from envs.registry import get_world
from envs.sandbox import Limits
from envs.tools import ToolError
from envs.workspace import (
    FIXED_NOW,
    GIT_DATE,
    Settings,
    WorkspaceWorld,
    _junit_outcomes,
    is_workspace_world,
    recipe,
)


@pytest.fixture()
def world() -> WorkspaceWorld:
    terminal = get_world("terminal")
    settings = Settings(sandbox="unsafe", sandbox_options={"allow_unsafe": True},
                        limits=Limits(timeout_s=10, cpu_s=10), max_output_chars=40, max_list_entries=3)
    return WorkspaceWorld(name="terminal", folder=terminal.folder, settings=settings)


def test_settings_come_from_workspace_yaml(tmp_path: Path) -> None:
    path = tmp_path / "workspace.yaml"
    path.write_text("kind: workspace\nsandbox: docker\nlimits: {timeout_s: 5, memory_mb: 512}\ntest_timeout_s: 9\n")
    s = Settings.load(path)
    assert s.sandbox == "docker" and s.limits == Limits(timeout_s=5, memory_mb=512) and s.test_timeout_s == 9
    assert is_workspace_world(tmp_path) and not is_workspace_world(tmp_path / "nowhere")
    path.write_text("kind: sql\n")
    with pytest.raises(ValueError, match="expected 'kind: workspace'"):
        Settings.load(path)
    path.write_text("kind: workspace\nsandbx: bwrap\n")
    with pytest.raises(ValueError, match=r"unknown keys \['sandbx'\]"):
        Settings.load(path)


def test_the_world_without_a_sandbox(world: WorkspaceWorld) -> None:
    env = world.command_env({"EXTRA": "1"})
    assert env["GIT_AUTHOR_DATE"] == env["GIT_COMMITTER_DATE"] == GIT_DATE and env["EXTRA"] == "1"
    assert world.compiled_rules() == [] and world.sandbox_backend == "unsafe"
    with pytest.raises(ValueError, match="no database connection"):
        world.env(conn=object())
    with pytest.raises(ValueError, match="needs a state reference"):
        world.env()
    with pytest.raises(ValueError, match="test_\\*.py without folders"):
        world.run_tests_batch([(Path("."), {"checks/test_x.py": ""})])
    assert world.run_tests_batch([]) == []


def test_the_live_workspace_resolves_paths_and_clips_output(world: WorkspaceWorld) -> None:
    ref = world.state_ref(recipe({"a.txt": "x" * 100, "d/b.txt": "b", "d/c.txt": "c"}))
    assert ref.state_hash and ref.patches and ref.world == "terminal"
    assert {"x" * 100} <= world.synthetic_values(ref)
    with world.env(ref) as env:
        assert env.now() == FIXED_NOW and env.state_hash() == ref.state_hash
        assert env.resolve("d/../a.txt") == "a.txt" and env.resolve(str(env.root / "d" / "b.txt")) == "d/b.txt"
        assert env.resolve("/workspace/d") == "d"  # as the sandbox names it
        for bad in ("../up", "/etc/passwd", ""):
            with pytest.raises(ToolError) as info:
                env.resolve(bad)
            assert info.value.code == "path_outside_workspace"

        def call(name: str, **args: Any) -> dict:
            obs = env.call(ToolCall(name=name, arguments=args))
            assert obs.ok, obs.content
            return json.loads(obs.content)

        content = call("read_file", path="a.txt")["content"]
        assert "characters cut" in content and content.startswith("x" * 20) and len(content) < 100
        listed = call("list_files")
        assert listed["entries"] == ["a.txt", "d/", "d/b.txt"] and listed["more"] == 1


def test_junit_outcomes_by_checks_folder() -> None:
    xml = b"""<testsuites><testsuite>
      <testcase classname="checks_n_0.test_task" name="test_ok"/>
      <testcase classname="checks_n_0.test_task" name="test_bad"><failure message="x"/></testcase>
      <testcase classname="checks_n_0.test_task.TestGroup" name="test_skip"><skipped/></testcase>
      <testcase classname="checks_n_1.test_task" name="test_err"><error/></testcase>
      <testcase classname="checks_n_1.test_task" name="test_err"/>
      <testcase classname="broken" name="collect"/>
    </testsuite></testsuites>"""
    got = _junit_outcomes(xml)
    assert got == {"checks_n_0": {"test_task.py::test_ok": "passed", "test_task.py::test_bad": "failed",
                                  "test_task.py::TestGroup::test_skip": "skipped"},
                   "checks_n_1": {"test_task.py::test_err": "error"}}  # a later pass does not undo an error
    report = ws.TestReport(got["checks_n_0"], 1, True)
    assert report.passed("test_task.py::test_ok") and not report.passed("test_task.py::test_bad")
    assert not report.passed("test_task.py::missing")
