"""Terminal world: workspace tools and errors, state hashing, the agent loop, built-in tasks,
seed/skill/LLM-assisted synthesis, and the tests_pass verifier (gold passes, bad fails)."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from data.records import Sampling, Step, Task, ToolCall, Trajectory, Verification
from envs.registry import get_world, list_worlds
from envs.sandbox.base import Limits
from envs.workspace import WorkspaceWorld, recipe, workspace_hash
from rollout.agent import AgentConfig, run_episode
from rollout.model import ChatResponse
from rollout.policies import ScriptedPolicy
from rollout.user import ScriptedUser
from synthesis.base import SynthesisConfig, SynthesisResult, get_method
from synthesis.terminal import builtin_tasks, seed_candidate, synthesize_terminal, validate
from verifiers.base import applies, get_verifier

pytestmark = pytest.mark.skipif(
    (lambda: __import__("envs.sandbox.bwrap", fromlist=["x"]).bwrap_unusable())() is not None,
    reason="bubblewrap cannot start a sandbox here")


@pytest.fixture(scope="module")
def world() -> WorkspaceWorld:
    w = get_world("terminal")
    assert isinstance(w, WorkspaceWorld)
    return w


def seed_task(world: WorkspaceWorld, name: str, rng_seed: str = "t:0") -> Task:
    result = SynthesisResult()
    out = validate(world, [seed_candidate(world, name, rng_seed)], result.drops)
    assert len(out) == 1, dict(result.drops)
    return out[0][1]


@pytest.fixture(scope="module")
def median_task(world: WorkspaceWorld) -> Task:
    return seed_task(world, "fix_median")


def trajectory(task: Task, calls: list[ToolCall], termination: str = "agent_stop") -> Trajectory:
    steps = [Step(index=i, turn=i + 1, action=c) for i, c in enumerate(calls)]
    return Trajectory(id=f"traj-probe-{len(calls)}", task_id=task.id, trial=0, model="probe", steps=steps,
                      termination=termination)  # type: ignore[arg-type]


# -- the world and its tools ---------------------------------------------------------------

def test_registered_world(world: WorkspaceWorld) -> None:
    assert "terminal" in list_worlds()
    assert set(world.tools) == {"run_shell", "read_file", "write_file", "apply_patch", "list_files"}
    assert all(s["type"] == "function" for s in world.tool_schemas())
    assert "2025-01-06" in world.system_prompt("2025-01-06T09:00:00+00:00")


def test_tools_and_error_classes(world: WorkspaceWorld) -> None:
    ref = world.state_ref(recipe({"a.txt": "b\na\n", "src/m.py": "X = 1\n"}))
    with world.env(ref) as env:
        assert env.state_hash() == ref.state_hash

        def call(name: str, **args: Any) -> tuple[str | None, dict]:
            obs = env.call(ToolCall(name=name, arguments=args))
            return obs.error, json.loads(obs.content)

        err, body = call("run_shell", command="sort a.txt > s.txt; echo done; exit 3")
        assert err is None and body["exit_code"] == 3 and body["stdout"] == "done\n"  # reported, not an error
        assert call("read_file", path="s.txt") == (None, {"path": "s.txt", "content": "a\nb\n"})
        assert call("read_file", path="/workspace/s.txt")[1]["content"] == "a\nb\n"
        assert call("read_file", path="../outside")[0] == "path_outside_workspace"
        assert call("read_file", path="/etc/passwd")[0] == "path_outside_workspace"
        call("run_shell", command="ln -s /etc/passwd leak")
        assert call("read_file", path="leak")[0] == "path_outside_workspace"  # no escape through links
        assert call("write_file", path="leak", content="x")[0] == "path_outside_workspace"
        assert call("read_file", path="nope.txt")[0] == "tool_error"
        assert call("run_shell", command=5)[0] == "bad_arguments"
        assert call("run_shell")[0] == "bad_arguments"
        assert call("teleport")[0] == "unknown_tool"
        assert call("apply_patch", path="src/m.py", old="Y", new="Z")[0] == "tool_error"
        assert call("apply_patch", path="src/m.py", old="X = 1", new="X = 2")[0] is None
        assert call("read_file", path="src/m.py")[1]["content"] == "X = 2\n"
        before = env.state_hash()
        assert call("write_file", path="out/new.txt", content="hi\n")[0] is None
        assert env.state_hash() != before
        entries = call("list_files")[1]["entries"]
        assert {"a.txt", "out/", "out/new.txt", "src/m.py", "s.txt"} <= set(entries)
        after = env.state_hash()
        call("read_file", path="a.txt")
        call("run_shell", command="python3 -c 'import this' > /dev/null")
        assert env.state_hash() == after  # reads and caches leave the hash alone


def test_command_timeout_is_an_error(world: WorkspaceWorld) -> None:
    quick = replace(world, settings=replace(world.settings, limits=Limits(timeout_s=1, cpu_s=5)), _cache={})
    ref = quick.state_ref(recipe({"a.txt": "x\n"}))
    with quick.env(ref) as env:
        obs = env.call(ToolCall(name="run_shell", arguments={"command": "sleep 5"}))
        assert obs.error == "timeout" and obs.latency_s < 4


def test_state_hash_is_reproducible_with_git(world: WorkspaceWorld) -> None:
    ref = world.state_ref(recipe({"f.txt": "1\n"}, ["git init -q -b main && git add -A && git commit -qm init"]))
    hashes = []
    for _ in range(2):
        with world.env(ref) as env:
            env.call(ToolCall(name="run_shell", arguments={"command": "echo 2 >> f.txt && git commit -qam two"}))
            hashes.append(env.state_hash())
    assert hashes[0] == hashes[1] != ref.state_hash  # fixed clock: same commit ids on replay
    bad = ref.model_copy(update={"state_hash": "0" * 32})
    with pytest.raises(ValueError, match="builds state"):
        world.env(bad)
    assert workspace_hash(world.build(ref)) == ref.state_hash


# -- the agent loop --------------------------------------------------------------------------

def test_agent_loop_runs_terminal_tasks(world: WorkspaceWorld, median_task: Task) -> None:
    t = asyncio.run(run_episode(median_task, world, ScriptedPolicy(median_task), ScriptedUser(median_task),
                                Sampling(seed=1), 0, AgentConfig()))
    assert t.termination == "user_stop"
    assert t.messages[0]["content"].startswith("You are a software engineer")
    assert [a.name for a in t.actions()] == [c.name for c in median_task.reference_solution]
    assert t.final_state_hash == median_task.target_state_hash
    assert all(s.state_hash for s in t.steps)
    verdict = get_verifier("tests_pass").verify(median_task, t)
    assert verdict.passed and verdict.score == 1.0, verdict.reasons
    assert verdict.verifier_version == "1.0.0"


# -- synthesis -------------------------------------------------------------------------------

@pytest.mark.slow
def test_every_builtin_task_validates(world: WorkspaceWorld) -> None:
    tasks, drops = builtin_tasks(world)
    assert drops == {}
    assert len(tasks) >= 30
    domains = Counter(t.metadata["domain"] for t in tasks)
    assert len(domains) >= 3 and all(n >= 4 for n in domains.values()), domains
    for t in tasks:
        assert t.world == "terminal" and t.method == "terminal"
        assert t.verification.fail_to_pass, t.metadata["seed"]
        assert "test_" not in json.dumps(t.initial_state.patches)  # checks never enter the workspace
        for call in t.reference_solution:
            assert call.arguments.get("command", "\0") not in t.instruction


def test_synth_method_emits_seed_and_skill_tasks(world: WorkspaceWorld) -> None:
    cfg = SynthesisConfig(method="terminal", world="airline", n_tasks=6, seed=5)
    result = get_method("terminal")(cfg, get_world("airline"))  # the CLI's default world is replaced
    assert len(result.tasks) == 6
    assert result.stats["by_origin"]["seed"] >= 2 and result.stats["by_origin"]["skill"] >= 2
    for t in result.tasks:
        assert t.world == "terminal" and t.verification.fail_to_pass
        assert t.verification.verifier == "tests_pass"
    skills = [t for t in result.tasks if t.metadata["origin"] == "skill"]
    assert all(3 <= len(t.metadata["skills"]) <= 5 for t in skills)
    assert len({t.metadata["domain"] for t in skills}) >= 2


def test_seed_inputs_vary_by_seed(world: WorkspaceWorld) -> None:
    specs = [seed_candidate(world, "totals_per_region", f"totals_per_region:{i}").spec for i in range(3)]
    assert len({json.dumps(s.files, sort_keys=True) for s in specs}) == 3
    assert len({s.tests for s in specs}) == 3
    skill = world.seeds.compose_skills("text", random.Random(1), 4)
    assert len(skill.skills) == 4
    with pytest.raises(ValueError, match="3 to 5"):
        world.seeds.compose_skills("text", random.Random(1), 6)


class TaskWriter:
    """A scripted ChatModel that answers task-writing prompts with canned replies."""

    name = "task-writer"

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[list[dict[str, Any]]] = []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        self.prompts.append(messages)
        return ChatResponse(text=self.replies.pop(0) if self.replies else "no more ideas")

    async def aclose(self) -> None:
        return None


GOOD_LLM_TASK = {
    "instruction": "numbers.txt has one integer per line. Write their sum to sum.txt.",
    "files": {"numbers.txt": "4\n8\n15\n16\n23\n42\n"},
    "tests": "def test_sum():\n    assert read('sum.txt').strip() == '108'\n",
    "solution": [{"name": "run_shell", "arguments": {"command": "awk '{s += $1} END {print s}' numbers.txt > sum.txt"}}],
}


def test_llm_assisted_synthesis_validates_what_the_model_writes(world: WorkspaceWorld) -> None:
    no_f2p = dict(GOOD_LLM_TASK, tests="def test_exists():\n    assert read('numbers.txt')\n")
    wrong = dict(GOOD_LLM_TASK, tests="def test_sum():\n    assert read('sum.txt').strip() == '107'\n")
    model = TaskWriter(["Here it is: " + json.dumps(GOOD_LLM_TASK), "not json at all", json.dumps(no_f2p),
                        json.dumps(wrong)])
    cfg = SynthesisConfig(method="terminal", n_tasks=1, seed=2, options={"modes": ["llm"], "batch": 4})
    result = synthesize_terminal(cfg, world, model)
    assert [t.metadata["origin"] for t in result.tasks] == ["llm"]
    assert result.tasks[0].verification.fail_to_pass == ["test_task.py::test_sum"]
    assert result.drops["llm_unparseable"] >= 1
    assert result.drops["no_fail_to_pass"] == 1 and result.drops["reference_fails_tests"] == 1
    assert "example" in model.prompts[0][1]["content"] and "tests" in model.prompts[0][0]["content"]
    with pytest.raises(ValueError, match="needs a model"):
        synthesize_terminal(cfg, world)


# -- verification ----------------------------------------------------------------------------

def test_verifier_judges_by_the_hidden_tests(world: WorkspaceWorld, median_task: Task) -> None:
    v = get_verifier("tests_pass")
    assert applies(v, median_task)
    gold = v.verify(median_task, trajectory(median_task, median_task.reference_solution))
    assert gold.passed and gold.details["audit_ok"], gold.reasons
    nothing = v.verify(median_task, trajectory(median_task, []))
    assert not nothing.passed and nothing.score == 0.0
    assert "FAIL_TO_PASS tests still failing" in nothing.reasons[0]
    broken = v.verify(median_task, trajectory(median_task, [
        ToolCall(name="write_file", arguments={"path": "stats.py", "content": "def median(v):\n    return 0\n"})]))
    assert not broken.passed and broken.details["pass_to_pass"]["test_task.py::test_odd"] == "failed"
    unclean = v.verify(median_task, trajectory(median_task, median_task.reference_solution, "max_turns"))
    assert not unclean.passed and unclean.score == 0.0


def test_verifier_refuses_tampered_or_unsound_tasks(world: WorkspaceWorld, median_task: Task) -> None:
    v = get_verifier("tests_pass")
    tampered = median_task.model_copy(deep=True)
    tests = tampered.verification.tests["files"]
    tests["test_task.py"] = tests["test_task.py"].replace("def test_even", "def _off")
    gold = trajectory(tampered, tampered.reference_solution)
    verdict = v.verify(tampered, gold)
    assert not verdict.passed and "sha256" in verdict.reasons[0]
    unsound = median_task.model_copy(deep=True)  # a reference that does nothing: the audit fails
    unsound.reference_solution = [ToolCall(name="run_shell", arguments={"command": "true"})]
    unsound.id = "task-unsound"
    verdict = v.verify(unsound, trajectory(unsound, median_task.reference_solution))
    assert not verdict.passed and any("audit" in r for r in verdict.reasons)


def test_verifier_applies_only_to_workspace_tasks(median_task: Task) -> None:
    v = get_verifier("tests_pass")
    airline_like = median_task.model_copy(update={"world": "airline"})
    assert not applies(v, airline_like)
    assert not applies(v, median_task.model_copy(update={"verification": Verification()}))


def test_synthesize_stage_writes_terminal_tasks(tmp_path: Path) -> None:
    from data import store
    from pipelines.config import RunConfig
    from pipelines.stages import synthesize

    cfg = RunConfig(synthesis=SynthesisConfig(method="terminal", n_tasks=2, seed=1))
    tasks = store.read_records(synthesize(cfg, tmp_path))
    assert len(tasks) == 2 and {t.world for t in tasks} == {"terminal"}
    assert all(t.verification.tests["files"] and t.verification.fail_to_pass for t in tasks)  # survive Parquet
