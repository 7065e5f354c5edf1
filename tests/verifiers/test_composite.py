"""Requests that depend on each other (issue 16 §2): a booking and then bags on that new
booking (and a cancellation besides), a new line and then an add-on or roaming on it, an
order and then a new shipping address for that order. The
dependent constraint is checked on the record the creating write made, the reference
dialogue grounds its id in that write's result, the policy verifier knows the new record by
the names the world gives it, and the user's reason belongs to the request it follows."""

from __future__ import annotations

import pytest

import synthesis.dialogue as dl
from data.records import Step, Task, ToolCall, Trajectory
from envs import cove
from envs.constraints import load_constraints, world_constraints
from envs.conversation import conversation
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from synthesis.scenario import reason_keys
from verifiers.composite import CompositeVerifier
from verifiers.constraints import score_constraints
from verifiers.policy import PolicyVerifier

# world -> the table of the record a write creates, its key, its owner column, which of the
# owner's other records a follow-up could be aimed at, the creating constraint's kind, and the
# follow-up tools
NEW_RECORD = {
    "airline": ("reservations", "reservation_id", "user_id", "status = 'active'", "book", {"update_baggage"}),
    "telecom": ("lines", "line_id", "customer_id", "status = 'active'", "new_line", {"add_addon", "set_roaming"}),
    "retail": ("orders", "order_id", "customer_id", "1 = 1", "order",
               {"modify_order_address"}),
}


@pytest.fixture(scope="module", params=list(NEW_RECORD))
def dependent(request: pytest.FixtureRequest) -> tuple[str, list[Task]]:
    world = get_world(request.param)
    n = 5 * len(world_constraints(world).KINDS)  # the kinds come in turn: every one five times
    result = get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", n_tasks=n, seed=0), world)
    return request.param, [t for t in result.tasks if t.metadata.get("depends_on")]


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
        assert {k.split(":")[0] for k in keys} == {c.name for c in _independent_writes(world, task)}
        for call in _dependent_writes(world, task):
            assert call.name in NEW_RECORD[name][5]
            assert not any(r in task.user.reason for r in banks.get(call.name, []))
        assert "since " in task.instruction


def _writes(world, task: Task) -> list[ToolCall]:  # type: ignore[no-untyped-def]
    return [c for c in task.reference_solution if world.tools[c.name].write]


def _dependent_writes(world, task: Task) -> list[ToolCall]:  # type: ignore[no-untyped-def]
    return [c for i, c in enumerate(_writes(world, task)) if str(i) in task.metadata["depends_on"]]


def _independent_writes(world, task: Task) -> list[ToolCall]:  # type: ignore[no-untyped-def]
    return [c for i, c in enumerate(_writes(world, task)) if str(i) not in task.metadata["depends_on"]]


def _traj(task: Task, calls: list[ToolCall]) -> Trajectory:
    steps = [Step(index=i, turn=i + 1, action=c) for i, c in enumerate(calls)]
    return Trajectory(id="t", task_id=task.id, trial=0, model="test", steps=steps, termination="user_stop")


def test_dependent_constraint_is_judged_on_the_record_the_agent_made(dependent: tuple[str, list[Task]]) -> None:
    name, tasks = dependent
    world = get_world(name)
    task = tasks[0]
    gold = task.reference_solution
    writes = _writes(world, task)
    creating, follow = writes[0], _dependent_writes(world, task)[0]
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
        follow = _dependent_writes(world, task)[0]
        conn = world.build_state(task.initial_state.seed, task.initial_state.scale, task.initial_state.patches)
        try:
            owner = _writes(world, task)[0].arguments[owner_col]
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


def test_policy_names_a_new_record_as_the_world_does(dependent: tuple[str, list[Task]]) -> None:
    name, tasks = dependent
    world = get_world(name)
    task = tasks[0]
    turns = [t for t in task.dialogue if t.role == "assistant"]
    assert PolicyVerifier().verify(task, dl.play(world, task, turns)).passed
    # the plan of the follow-up without any name of the new record: not announced
    follow = _dependent_writes(world, task)[0]
    new_id = follow.arguments[NEW_RECORD[name][1]]
    at = next(i for i, t in enumerate(turns) if any(c.key() == follow.key() for c in t.tool_calls))
    plan_turn = turns[at - 1]
    result = next(m for m in dl.play(world, task, turns).messages
                  if m["role"] == "tool" and new_id in (m.get("content") or ""))
    names = [n for n in (result["content"].split('"')) if n and n in plan_turn.content and len(n) > 5]
    vague = plan_turn.content
    for n in names:
        vague = vague.replace(n, "it")
    assert vague != plan_turn.content
    bad = [t.model_copy(update={"content": vague}) if i == at - 1 else t for i, t in enumerate(turns)]
    verdict = PolicyVerifier().verify(task, dl.play(world, task, bad))
    assert not verdict.passed and any("announce_and_confirm" in r for r in verdict.reasons)


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
        pay, book = _writes(world, task)
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
