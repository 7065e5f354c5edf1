"""TRL environments in the worlds (`train.environments`): one method per world tool with the
world's own schema, episodes judged by the task's verifier, and a clean stop required."""

from __future__ import annotations

import json
from typing import Any

import pytest

from data.records import Task, canonical_json
from envs.registry import get_world
from envs.world import World
from train.environments import (
    ended_cleanly,
    environment_class,
    environment_factories,
    play_reference,
    reward_gap,
    user_tool_schema,
    verifier_reward,
)

TOOL_WORLDS = ["airline", "retail", "telecom", "clinic"]



@pytest.mark.parametrize("world", TOOL_WORLDS)
def test_environment_methods_render_the_worlds_own_tool_schemas(world: str) -> None:
    from transformers.utils import get_json_schema

    w = get_world(world)
    env = environment_class(world)()
    for spec in w.tools.values():
        got = get_json_schema(getattr(env, spec.name))["function"]
        want = spec.schema()["function"]
        assert got["name"] == want["name"] and got["description"] == want["description"]
        assert sorted(got["parameters"].get("required", [])) == sorted(want["parameters"]["required"])
        # same properties, types, enums and descriptions ("default" is not part of TRL's schema)
        strip = {"default", "nullable"}
        assert ({k: {a: b for a, b in v.items() if a not in strip} for k, v in got["parameters"]["properties"].items()}
                == {k: {a: b for a, b in v.items() if a not in strip}
                    for k, v in want["parameters"]["properties"].items()})
    # TRL turns every public method into a tool: only the world's tools, the user channel and reset
    public = {n for n in dir(type(env)) if not n.startswith("_") and callable(getattr(type(env), n))}
    assert public == set(w.tools) | {"reset", "send_message_to_user"}
    user = get_json_schema(env.send_message_to_user)
    assert user == user_tool_schema() and "reply" in user["function"]["description"]


def _episode(env: Any, calls: list[Any]) -> None:
    for c in calls:
        getattr(env, c.name)(**c.arguments)


def test_the_reward_is_the_whole_verdict_with_the_user_in_the_loop(tasks: list[Task], airline: World) -> None:
    task = next(t for t in tasks if t.dialogue and t.verification.outcome == "change"
                and sum(airline.tools[c.name].write for c in t.reference_solution) >= 1)
    env = environment_factories(["airline"])["airline"]()
    row = {"task": canonical_json(task.model_dump()), "prompt": [], "task_id": task.id}
    assert env.reset(**row) is None
    answer = play_reference(env, task)
    assert [m["role"] for m in env.messages].count("user") >= 3  # the opening, the id, the go-ahead
    logged: dict[str, float] = {}
    assert verifier_reward([[{"role": "assistant", "content": answer}]], environments=[env],
                           log_metric=logged.__setitem__) == [1.0]
    assert env.verdict is not None and env.verdict.passed and env.verdict.verifier == "composite"
    assert logged["verifier/passed"] == 1.0 and logged["verifier/user_turns"] >= 2

    # the same writes without asking the user anything: the outcome holds, the process does not
    env.reset(**row)
    _episode(env, task.reference_solution)
    [silent] = verifier_reward([[{"role": "assistant", "content": answer}]], environments=[env])
    assert silent < 1.0 and not env.verdict.passed
    assert any(r.startswith("POLICY:") for r in env.verdict.reasons)

    # ended mid tool loop: not a clean stop, scored 0
    mid = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "x"}}]}]
    assert verifier_reward([mid], environments=[env]) == [0.0]

    # reset gives a fresh copy: the earlier writes are gone, so stopping at once scores < 1
    env.reset(**row)
    assert env.steps == [] and len(env.messages) == 1
    [fresh] = verifier_reward([[{"role": "assistant", "content": "Done."}]], environments=[env])
    assert fresh < 1.0 and not env.verdict.passed

    # a rule violation or a bad argument is a tool result, never an exception
    writes = [c for c in task.reference_solution if airline.tools[c.name].write]
    out = json.loads(getattr(env, writes[0].name)(**{**writes[0].arguments, "nonexistent": 1}))
    assert out["error"] == "bad_arguments" and env.errors["bad_arguments"] == 1


@pytest.mark.parametrize("world", TOOL_WORLDS)
def test_no_op_never_earns_the_reward_of_the_gold(world: str) -> None:
    """On refusal and answer tasks too: doing nothing and saying nothing scores below the gold."""
    from synthesis.base import SynthesisConfig, get_method

    w = get_world(world)
    tasks = [t for m in ("logic_driven", "constraint_guided", "self_play")
             for t in get_method(m)(SynthesisConfig(method=m, world=world, n_tasks=6, seed=5), w).tasks if t.dialogue]
    assert {t.verification.outcome for t in tasks} >= {"change"}
    gaps = [reward_gap(task) for task in tasks]
    assert all(noop < gold for gold, noop in gaps), [(t.id, t.verification.outcome, g) for t, g in zip(tasks, gaps, strict=True)]
    assert sum(gold == 1.0 for gold, _ in gaps) >= 0.9 * len(gaps), gaps


def test_environment_refuses_a_task_of_another_world(tasks: list[Task]) -> None:
    env = environment_class("retail")()
    with pytest.raises(ValueError, match="not 'retail'"):
        env.reset(task=canonical_json(tasks[0].model_dump()))
    with pytest.raises(ValueError, match="task"):
        env.reset(prompt=[])
    with pytest.raises(ValueError, match="environments"):
        verifier_reward([[]])


def test_a_release_made_with_another_world_or_verifier_version_is_refused_before_training(
        tasks: list[Task]) -> None:
    """Every row is checked up front: a row of another world version names its task and the
    versions; a verifier version counts only for a row judged by a verifier in use; rows of
    schema version 1 (no versions) pass."""
    from envs.registry import world_version
    from train.environments import check_release_versions
    from verifiers.base import get_verifier

    rows = [{"task": canonical_json(t.model_dump()), "world_version": world_version(t.world),
             "verifier": "composite", "verifier_version": get_verifier("composite").version} for t in tasks[:3]]
    check_release_versions(rows + [{"task": rows[0]["task"]}], ["composite"])
    stale = [*rows[:2], {**rows[2], "world_version": "0123456789abcdef"}]
    with pytest.raises(ValueError, match=f"task {tasks[2].id} was made with world 'airline' version 0123456789abcdef"):
        check_release_versions(stale, ["composite"])
    judged = [*rows[:2], {**rows[2], "verifier_version": "0.0.1"}]
    with pytest.raises(ValueError, match="judged by composite 0.0.1"):
        check_release_versions(judged, ["composite"])
    check_release_versions(judged, ["state_match"])  # judged by another verifier here


def test_constraint_tasks_can_be_scored_by_constraint_satisfaction() -> None:
    from synthesis.base import SynthesisConfig, get_method
    from verifiers.constraints import score_constraints

    world = get_world("airline")
    task = get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", n_tasks=1, seed=3), world).tasks[0]
    assert task.verification.constraints is not None
    env = environment_class("airline", ["state_equivalence", "constraint_satisfaction"])()
    env.reset(task=task.model_dump_json())
    _episode(env, task.reference_solution)
    [reward] = verifier_reward([[{"role": "assistant", "content": "ok"}]], environments=[env])
    assert env.verdict.verifier == "constraint_satisfaction"
    assert reward == pytest.approx(score_constraints(task, task.reference_solution).score) and reward == 1.0


def test_ended_cleanly() -> None:
    assert ended_cleanly([{"role": "assistant", "content": "bye"}])
    assert not ended_cleanly([{"role": "assistant", "tool_calls": [{}]}])
    assert not ended_cleanly([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "{}"}])
    assert not ended_cleanly([])
