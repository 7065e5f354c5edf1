"""Constraint satisfaction: the score formula, the gold path satisfies its constraints, and a
dependent constraint is judged on the record the agent's own creating write made (issue 16 §2)."""

from __future__ import annotations

import pytest

from data.records import Task, ToolCall
from envs.registry import get_world
from tests.verifiers.dependent import NEW_RECORD, dependent_writes, writes_of
from verifiers.constraints import constraint_score, score_constraints


def test_dependent_constraint_is_judged_on_the_record_the_agent_made(dependent: tuple[str, list[Task]]) -> None:
    name, tasks = dependent
    world = get_world(name)
    task = tasks[0]
    gold = task.reference_solution
    writes = writes_of(world, task)
    creating, follow = writes[0], dependent_writes(world, task)[0]
    # without the creating write the follow-up fails and the constraint says why
    s = score_constraints(task, [c for c in gold if c is not creating])
    assert not any(s.satisfied)
    reasons = [d["reason"] for d in s.details]
    assert any(r.startswith(("the new booking was not made", "the new line it is about was not opened",
                             "the new order was not placed")) for r in reasons), reasons
    # the follow-up aimed at some other record of the user (of the first task whose user has
    # one): the creation holds, the follow-up does not
    table, key, owner_col, which = NEW_RECORD[name][:4]
    for task in tasks:
        gold = task.reference_solution
        follow = dependent_writes(world, task)[0]
        conn = world.build_state(task.initial_state.seed, task.initial_state.scale, task.initial_state.patches)
        try:
            owner = writes_of(world, task)[0].arguments[owner_col]
            others = [r[0] for r in conn.execute(f"SELECT {key} FROM {table} WHERE {owner_col} = ? AND {which}",
                                                 (owner,))]
        finally:
            conn.close()
        if others:
            break
    assert others
    elsewhere = [ToolCall(name=c.name, arguments={**c.arguments, key: others[0]}) if c is follow else c for c in gold]
    s = score_constraints(task, elsewhere)
    assert s.satisfied[0] and not all(s.satisfied)


def test_constraint_score_formula() -> None:
    """satisfied/|C| · 1/(1 + weight·redundant writes); 0 for an empty constraint set."""
    assert constraint_score(3, 3, 0) == 1.0
    assert constraint_score(2, 4, 0) == 0.5
    assert constraint_score(3, 3, 2) == pytest.approx(0.5)  # two redundant writes halve it at weight 0.5
    assert constraint_score(3, 3, 2, weight=0.0) == 1.0
    assert constraint_score(0, 0, 0) == 0.0


def test_gold_satisfies_every_constraint_and_a_dropped_write_does_not(cg_tasks: list[Task]) -> None:
    world = get_world("airline")
    for task in cg_tasks:
        gold = score_constraints(task, task.reference_solution)
        assert all(gold.satisfied) and gold.score == 1.0 and gold.redundant_writes == 0, gold.details
        last = writes_of(world, task)[-1]
        dropped = score_constraints(task, [c for c in task.reference_solution if c is not last])
        assert not all(dropped.satisfied) and dropped.score < 1.0
