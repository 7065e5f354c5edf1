"""Set Designer substitutes and noise (methods.md §1; the LLM paraphrase of instructions: test_paraphrase.py).

On every tool-use world, tasks synthesized with substitutes and noise replay to their
targets, list the rows that were added, and their initial state differs from the designed
one only by those rows; a look-alike the user could not tell apart is rejected as ambiguous.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from data.records import Task
from envs import state as st
from envs.registry import get_world
from envs.world import World
from synthesis import logic_driven
from synthesis.base import SynthesisConfig, get_method
from synthesis.explorer import ExplorerConfig, explore
from synthesis.logic_driven import replay
from synthesis.set_designer import ambiguous_rows, design_states, with_haystack

WORLDS = ["airline", "retail", "telecom", "clinic"]
OPTIONS = {"substitutes": 2, "noise_rows": 3}


@pytest.fixture(scope="module")
def noisy() -> dict[str, tuple[World, list[Task]]]:
    out = {}
    for name in WORLDS:
        world = get_world(name)
        result = get_method("logic_driven")(SynthesisConfig(world=name, n_tasks=3, seed=7, options=OPTIONS), world)
        assert len(result.tasks) == 3, (name, dict(result.drops))
        out[name] = (world, result.tasks)
    return out


def _row(conn: Any, record: str) -> dict[str, Any] | None:
    table, key = record.split(":", 1)
    return st.canonical_dump(conn)[table].get(key)


@pytest.mark.parametrize("name", WORLDS)
def test_noisy_tasks_validate_and_differ_only_by_added_rows(noisy: dict, name: str) -> None:
    world, tasks = noisy[name]
    n_subs = 0
    for task in tasks:
        assert replay(world, task) == task.target_state_hash
        subs, noise = task.metadata["substitutes"], task.metadata["noise"]
        assert len(subs) <= OPTIONS["substitutes"] and len(noise) == OPTIONS["noise_rows"], task.metadata
        n_subs += len(subs)
        added = subs + noise
        ref = task.initial_state
        designed = world.build_state(ref.seed, ref.scale, ref.patches[:-len(added)])
        initial = world.build_state(ref.seed, ref.scale, ref.patches)
        changes = st.diff_states(designed, initial)
        assert {c.op for c in changes} == {"insert"}
        assert {f"{c.table}:{c.key}" for c in changes} == {a["record"] for a in added}
        for a in added:  # a near-copy: the source's values except its key and the stepped columns
            source, copy = _row(designed, a["of"]), _row(initial, a["record"])
            assert source is not None and copy is not None and a["changed"]
            for col, (before, after) in a["changed"].items():
                assert source[col] == before and copy[col] == after and before != after
            pk = set(st.primary_key(initial, a["record"].split(":")[0]))
            same = {c for c in source if c not in pk and c not in a["changed"]}
            assert all(source[c] == copy[c] for c in same), a
        # the target diff never touches an added row: the agent must leave them alone
        touched = {f"{c['table']}:{c['key']}" for c in task.target_diff}
        assert not touched & {a["record"] for a in added}
        known = {str(v) for v in task.user.known_info.values()}
        for a in noise:  # noise is unrelated to what the user knows
            assert not known & {str(v) for v in (_row(initial, a["record"]) or {}).values()}
        designed.close()
        initial.close()
    assert n_subs > 0, name


def test_defaults_add_nothing() -> None:
    world = get_world("airline")
    plain = get_method("logic_driven")(SynthesisConfig(n_tasks=2, seed=3), world)
    zero = get_method("logic_driven")(SynthesisConfig(n_tasks=2, seed=3, options={"substitutes": 0,
                                                                                  "noise_rows": 0}), world)
    assert [t.id for t in plain.tasks] == [t.id for t in zero.tasks]
    assert all("substitutes" not in t.metadata for t in plain.tasks)
    with pytest.raises(ValueError, match="noise_rows"):
        get_method("logic_driven")(SynthesisConfig(options={"noise_rows": -1}), world)


def _seats_exact(world: World) -> tuple[Any, Any]:
    for seed in range(2, 12):
        for variant, ref in design_states(world, seed=seed, scale=30, n=7):
            if variant.kind == "seats_exact":
                return variant, ref
    raise AssertionError("no seats_exact variant")


def _goal(world: World, variant: Any, ref: Any) -> tuple[Any, Any]:
    """The booking goal of a seats_exact state: its path and the instruction stating it."""
    env = world.env(ref)
    root, reached, _ = explore(world, env, variant.focus, ExplorerConfig(), random.Random(0))
    before = st.restore(root.snapshot)
    best = None
    for r in reached.values():
        if len(r.path) != 1:
            continue
        after = st.restore(r.snapshot)
        changes = st.diff_states(before, after)
        goal = world.design.describe(changes, before, after, variant)
        if goal is not None and r.path[0].arguments.get("flight_id") == variant.focus["flight_ids"][0]:
            best = (r.path, goal.instruction)
        after.close()
    env.close()
    assert best is not None
    return best


def test_a_look_alike_the_user_cannot_tell_apart_is_ambiguous() -> None:
    world = get_world("airline")
    variant, ref = _seats_exact(world)
    # a copy of the boundary flight differing only in its seat count: the instruction
    # ("book ... on flight HAT.. from A to B on D at T") fits both, so it is ambiguous
    booked = f'flights:{json.dumps([variant.focus["flight_ids"][0]])}'
    twin_ref, twins, _ = with_haystack(world, variant, ref, random.Random(1), substitutes=2,
                                       columns=["seats_available"])
    assert {a.table for a in twins} == {"flights"} and all(set(a.changed) == {"seats_available"} for a in twins)
    path, instruction = _goal(world, variant, twin_ref)
    assert [a.of for a in ambiguous_rows(world, twin_ref, path, instruction, variant, twins)] == [booked]
    # the same flight a day later (or earlier) is told apart by its date
    later_ref, later, _ = with_haystack(world, variant, ref, random.Random(1), substitutes=2, columns=["date"])
    assert booked in {a.of for a in later} and all(set(a.changed) == {"date"} for a in later)
    path, instruction = _goal(world, variant, later_ref)
    assert ambiguous_rows(world, later_ref, path, instruction, variant, later) == []


def test_synthesis_drops_ambiguous_substitutes(monkeypatch: pytest.MonkeyPatch) -> None:
    """With substitutes forced to differ only in numbers the user never states, the look-alikes
    of booked flights are removed and counted; every kept task still validates."""
    real = logic_driven.with_haystack

    def numbers_only(*args: Any, **kw: Any) -> Any:
        return real(*args, **kw, columns=["seats_available", "balance"])

    monkeypatch.setattr(logic_driven, "with_haystack", numbers_only)
    world = get_world("airline")
    result = logic_driven.synthesize(SynthesisConfig(n_tasks=4, seed=7, options={"substitutes": 3}), world)
    assert result.drops["ambiguous_substitute"] > 0, dict(result.drops)
    for task in result.tasks:
        assert replay(world, task) == task.target_state_hash
        booked = {json.dumps([c.arguments["flight_id"]]) for c in task.reference_solution if "flight_id" in c.arguments}
        for sub in task.metadata.get("substitutes", []):  # no kept twin of a flight the goal acts on
            table, key = sub["of"].split(":", 1)
            assert not (table == "flights" and key in booked), sub
