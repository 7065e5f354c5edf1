"""τ²'s own evaluator as a second judge (verifiers/tau2_reward.py): τ²'s train tasks, their
gold actions replayed as trajforge trajectories in the τ² worlds, score τ²'s reward 1.0; a
no-op or a wrong argument scores 0. Skipped without the `tau2` extra."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("tau2")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network when τ² imports litellm

from data.records import Task, ToolCall  # noqa: E402
from envs.registry import get_world  # noqa: E402
from envs.tau2_world import Tau2World, task_from_tau2, tau2_tasks  # noqa: E402
from verifiers.tau2_reward import reference_messages, tau2_reward, to_tau2_messages  # noqa: E402


def gold_messages(world: Tau2World, task: Task, calls: list[ToolCall] | None = None) -> list[dict]:
    """The reference conversation (or one making `calls`) that tells the task's facts."""
    return reference_messages(task, calls)


def _writes(world: Tau2World, task: Task) -> list[ToolCall]:
    return [c for c in task.reference_solution if world.tools[c.name].write]


def _replay_share(domain: str, limit: int | None) -> tuple[int, int, list[str]]:
    world = get_world(f"tau2_{domain}")
    assert isinstance(world, Tau2World)
    passed, fails = 0, []
    tasks = tau2_tasks(domain, "train")[:limit]
    for t2 in tasks:
        task = task_from_tau2(world, t2)
        r = tau2_reward(task, gold_messages(world, task))
        assert not r.mismatches, (t2.id, r.mismatches)  # our tool results are τ²'s
        if r.passed:
            passed += 1
        else:
            fails.append(f"{t2.id}: db={r.db_match} actions={r.action_matches} communicate={r.communicate_met}")
    return passed, len(tasks), fails


@pytest.mark.parametrize("domain", ["airline", "retail"])
@pytest.mark.slow  # a τ² or whole-flow integration test: make test runs it, the fast tier does not
def test_replayed_gold_scores_one_on_train_tasks(domain: str) -> None:
    passed, total, fails = _replay_share(domain, 4)
    assert passed == total, fails


@pytest.fixture(scope="module")
def retail_write_task() -> tuple[Tau2World, Task]:
    world = get_world("tau2_retail")
    assert isinstance(world, Tau2World)
    for t2 in tau2_tasks("retail", "train"):
        task = task_from_tau2(world, t2)
        if _writes(world, task) and task.target_state_hash != task.initial_state.state_hash:
            return world, task
    raise AssertionError("no retail train task writes")


def test_a_no_op_scores_zero_on_a_task_that_needs_a_write(retail_write_task: tuple[Tau2World, Task]) -> None:
    world, task = retail_write_task
    reads = [c for c in task.reference_solution if not world.tools[c.name].write]
    r = tau2_reward(task, gold_messages(world, task, reads))
    assert r.reward == 0.0 and r.db_match is False and not all(r.action_matches)
    assert tau2_reward(task, gold_messages(world, task)).passed


def test_a_changed_argument_or_an_early_stop_scores_zero(retail_write_task: tuple[Tau2World, Task]) -> None:
    world, task = retail_write_task
    calls = list(task.reference_solution)
    i = max(k for k, c in enumerate(calls) if world.tools[c.name].write)
    args = dict(calls[i].arguments)
    key = next(k for k, v in args.items() if isinstance(v, str) and k != "order_id") if len(args) > 1 else next(iter(args))
    args[key] = "credit_card_0000000" if "payment" in key else args[key] + "x"
    calls[i] = ToolCall(name=calls[i].name, arguments=args)
    assert tau2_reward(task, gold_messages(world, task, calls)).reward == 0.0
    assert tau2_reward(task, gold_messages(world, task), termination="max_turns").reward == 0.0


def test_results_that_differ_from_tau2s_are_counted(retail_write_task: tuple[Tau2World, Task]) -> None:
    from tau2.registry import registry

    world, task = retail_write_task
    msgs = gold_messages(world, task)
    tool = next(m for m in msgs if m["role"] == "tool")
    tool["content"] = json.dumps({"error": "tool_error", "code": "ValueError", "message": "made up"})
    _, mismatches = to_tau2_messages(msgs, registry.get_env_constructor("retail")())
    assert len(mismatches) == 1 and "error here, ok in τ²" in mismatches[0]


def test_the_tau2_verifier_judges_tasks_of_tau2_worlds_with_taus_reward(
        retail_write_task: tuple[Tau2World, Task]) -> None:
    """The registered verifier `tau2`: applies to a τ² world's task that carries its τ² task
    (not to trajforge's own worlds, nor to a task without it); passed = τ² reward 1.0, the
    reasons are τ²'s failed checks."""
    from data.records import Trajectory
    from synthesis.base import SynthesisConfig, get_method
    from verifiers.base import get_verifier

    world, task = retail_write_task
    v = get_verifier("tau2")
    own = get_method("logic_driven")(SynthesisConfig(world="airline", n_tasks=1, seed=0), get_world("airline")).tasks[0]
    assert v.applies_to(task) and not v.applies_to(own)
    assert not v.applies_to(task.model_copy(update={"metadata": {}}))

    def traj(messages: list[dict], termination: str = "agent_stop") -> Trajectory:
        return Trajectory(id=f"t{len(messages)}{termination}", task_id=task.id, trial=0, model="m",
                          messages=messages, termination=termination)  # type: ignore[arg-type]

    good = v.verify(task, traj(gold_messages(world, task)))
    assert good.passed and good.score == 1.0 and good.verifier == "tau2" and good.reasons == []
    assert good.details["db_match"] is True
    reads = [c for c in task.reference_solution if not world.tools[c.name].write]
    bad = v.verify(task, traj(gold_messages(world, task, reads)))
    assert not bad.passed and "τ²: database differs from the gold actions' end state" in bad.reasons
    late = v.verify(task, traj(gold_messages(world, task), "max_turns"))
    assert not late.passed and late.reasons == ["τ²: ended by max_turns (τ² scores only an agent or user stop)"]
    unreadable = v.verify(task, traj([{"role": "user", "content": [{"no": "text"}]}]))  # τ² cannot read it
    assert not unreadable.passed and unreadable.details["error"] and unreadable.reasons[0].startswith("τ²: evaluator error")
