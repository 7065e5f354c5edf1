"""Requests that depend on each other (issue 16 §2): a booking and then bags on that new
booking (and a cancellation besides), a new line and then an add-on or roaming on it, an
order and then a new shipping address for that order. The reference dialogue grounds the
new record's id in the creating write's result, and the user's reason belongs to the request
it follows (the constraint verifier's and the policy verifier's side of it: test_constraints,
test_policy). And the composite verdict by a task's reward basis."""

from __future__ import annotations

import pytest

import synthesis.dialogue as dl
from data.records import Task
from envs import cove
from envs.constraints import load_constraints, world_constraints
from envs.conversation import conversation
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from synthesis.scenario import reason_keys
from tests.verifiers.dependent import NEW_RECORD, dependent_writes, independent_writes, writes_of
from tests.verifiers.variants import bare, facts, with_verification
from verifiers.audit import build_dialogue, build_trajectory
from verifiers.composite import CompositeVerifier
from verifiers.constraints import score_constraints


def test_dependent_tasks_are_made_and_their_reference_passes(dependent: tuple[str, list[Task]]) -> None:
    name, tasks = dependent
    world = get_world(name)
    assert len(tasks) >= 2
    writes_per_task = set()
    for task in tasks:
        constraints = load_constraints(task.verification.constraints)
        writes = [c for c in task.reference_solution if world.tools[c.name].write]
        writes_per_task.add(len(writes))
        for i, j in task.metadata["depends_on"].items():
            dep, maker = constraints[int(i)], constraints[j]
            assert dep.fields[cove.ON_NEW] == j and maker.kind == NEW_RECORD[name][4]
        # the dependent write's id is first shown by the creating write's result, not by a read before it
        new_id = next(v for c in constraints if cove.ON_NEW in c.fields for k, v in c.fields.items()
                      if k == NEW_RECORD[name][1])
        first = next(i for i, c in enumerate(task.reference_solution) if new_id in c.arguments.values())
        assert world.tools[task.reference_solution[first].name].write
        assert score_constraints(task, task.reference_solution).score == 1.0
        episode = dl.play(world, task, [t for t in task.dialogue if t.role == "assistant"])
        assert CompositeVerifier().verify(task, episode).passed
        assert "that new" in task.instruction or "for it" in task.instruction
    if name == "airline":
        assert 3 in writes_per_task  # book, bags on it, and a cancellation: three requests


def test_dependent_write_carries_no_reason_of_its_own(dependent: tuple[str, list[Task]]) -> None:
    """Bags on the booking being made are part of that booking: no "my luggage changed since
    I booked" reason; the goal gives the user's own reason for them instead ("since ...")."""
    name, tasks = dependent
    world = get_world(name)
    banks = conversation(world).module.REASONS
    for task in tasks:
        keys = reason_keys(world, task, "change", None)
        assert {k.split(":")[0] for k in keys} == {c.name for c in independent_writes(world, task)}
        for call in dependent_writes(world, task):
            assert call.name in NEW_RECORD[name][5]
            assert not any(r in task.user.reason for r in banks.get(call.name, []))
        assert "since " in task.instruction


def test_a_booking_the_balance_blocks_comes_after_paying_it() -> None:
    """Clinic: a patient owing more than the booking limit (R07) pays the balance first, then
    books; the payment is part of the booking's request (its reason is the booking's), and a
    booking attempted before the payment, or without it, is refused and judged unmet."""
    from envs.worlds.clinic.constraints import BALANCE_LIMIT

    world = get_world("clinic")
    n = 2 * len(world_constraints(world).KINDS)
    tasks = [t for t in get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", n_tasks=n,
                                                                           seed=0), world).tasks
             if t.metadata.get("depends_on")]
    assert len(tasks) >= 1
    for task in tasks:
        pay, book = writes_of(world, task)
        assert (pay.name, book.name) == ("pay_balance", "book_appointment") and pay.arguments["amount"] > BALANCE_LIMIT
        assert task.metadata["depends_on"] == {"0": 1}
        constraints = load_constraints(task.verification.constraints)
        assert constraints[1].fields[cove.AFTER] == 0
        assert reason_keys(world, task, "change", None) == ["book_appointment"]
        assert "first pay off" in task.instruction and "since " in task.instruction
        assert score_constraints(task, task.reference_solution).score == 1.0
        episode = dl.play(world, task, [t for t in task.dialogue if t.role == "assistant"])
        assert CompositeVerifier().verify(task, episode).passed
        gold = task.reference_solution
        swapped = [c for c in gold if c is not pay and c is not book] + [book, pay]
        s = score_constraints(task, swapped)
        assert s.satisfied == [True, False], s.details
        s = score_constraints(task, [c for c in gold if c is not pay])
        assert s.satisfied == [False, False]



def test_composite_by_reward_basis(tasks: list[Task], cg_tasks: list[Task]) -> None:
    c = CompositeVerifier()
    task = bare(tasks[0])
    assert c.basis(task) == ["DB"] and c.basis(bare(cg_tasks[0])) == ["CONSTRAINTS"]
    # a task with a reference dialogue names outcome, communication and process; its dialogue passes
    assert c.basis(tasks[0]) == ["DB", "COMMUNICATE", "POLICY"]
    assert c.basis(cg_tasks[0]) == ["CONSTRAINTS", "COMMUNICATE", "POLICY"]
    assert c.verify(tasks[0], build_dialogue(tasks[0], tasks[0].dialogue)).passed
    t2 = with_verification(task, basis=["db", "COMMUNICATE", "ACTION"], communicate=facts("complete"))
    gold = build_trajectory(t2, t2.reference_solution)
    v = c.verify(t2, gold)
    assert v.passed and v.score == 1.0 and v.verifier == "composite" and v.verifier_version
    assert set(v.details["components"]) == {"DB", "COMMUNICATE", "ACTION"}
    assert v.details["components"]["DB"]["verifier"] == "state_equivalence"
    quiet = build_trajectory(t2, t2.reference_solution, text="Bye.")
    q = c.verify(t2, quiet)
    assert not q.passed and q.score == 0.0 and any(r.startswith("COMMUNICATE:") for r in q.reasons)
    cons = c.verify(with_verification(task, basis=["CONSTRAINTS"]), gold)
    assert not cons.passed and "cannot judge" in cons.reasons[0]
    with pytest.raises(ValueError, match="unknown reward basis"):
        c.verify(with_verification(task, basis=["DB", "VIBES"]), gold)
