"""A pass means a good conversation: the composite verdict over outcome, what the user was
told and the policy's process, on hand-made variants of reference dialogues."""

from __future__ import annotations

import pytest

from data.records import Task, Turn
from envs.registry import get_world
from envs.world import World
from verifiers.audit import build_dialogue, dialogue_alternatives
from verifiers.base import get_verifier


@pytest.fixture(scope="module")
def two_bookings(tasks: list[Task]) -> Task:
    task = tasks[0]
    writes = [c.name for t in task.dialogue for c in t.tool_calls if c.name == "book_reservation"]
    assert len(writes) == 2  # the fixture's first task books two flights
    return task


def _write_at(world: World, turns: list[Turn]) -> list[int]:
    return [i for i, t in enumerate(turns) if any(world.tools[c.name].write for c in t.tool_calls)]


def _verdict(task: Task, turns: list[Turn]):  # noqa: ANN202
    return get_verifier("composite").verify(task, build_dialogue(task, turns))


def test_the_reference_dialogue_passes_and_two_bookings_in_reverse_order_pass(two_bookings: Task) -> None:
    assert _verdict(two_bookings, two_bookings.dialogue).passed
    alternatives = dialogue_alternatives(two_bookings)
    [swapped] = [turns for kind, _, turns in alternatives if kind == "reorder_writes"]
    assert swapped != two_bookings.dialogue
    for kind, _, turns in alternatives:  # every alternative is a correct conversation
        assert _verdict(two_bookings, turns).passed, kind
    v = _verdict(two_bookings, swapped)
    assert v.passed, v.reasons  # the ids are minted from content, so the order does not matter


def test_a_write_without_a_yes_fails_on_process(airline: World, two_bookings: Task) -> None:
    turns = list(two_bookings.dialogue)
    first = _write_at(airline, turns)[0]
    assert turns[first - 1].role == "user"
    skipped = turns[: first - 1] + turns[first:]  # the user's yes is gone
    v = _verdict(two_bookings, skipped)
    assert not v.passed and any(r.startswith("POLICY: announce_and_confirm") for r in v.reasons)


def test_a_write_after_a_decline_fails(airline: World, two_bookings: Task) -> None:
    turns = list(two_bookings.dialogue)
    first = _write_at(airline, turns)[0]
    declined = [*turns[: first - 1], Turn(role="user", content="No, don't do that."), *turns[first:]]
    v = _verdict(two_bookings, declined)
    assert not v.passed and any("no_write_after_decline" in r for r in v.reasons)


def test_an_id_never_shown_fails_grounding(airline: World, two_bookings: Task) -> None:
    turns = list(two_bookings.dialogue)
    reads = [i for i, t in enumerate(turns) if any(c.name == "search_flights" for c in t.tool_calls)]
    unread = [t for i, t in enumerate(turns) if i not in reads]  # the flight ids were never shown
    v = _verdict(two_bookings, unread)
    assert not v.passed and any("grounded_arguments" in r and "flight_id" in r for r in v.reasons)


def test_a_silent_ending_fails_on_communication(airline: World, two_bookings: Task) -> None:
    turns = [*two_bookings.dialogue[:-1], Turn(role="assistant", content="Your request is complete.")]
    v = _verdict(two_bookings, turns)
    assert not v.passed and any(r.startswith("COMMUNICATE:") for r in v.reasons)


def test_a_refusal_must_explain_and_claim_nothing(tasks: list[Task]) -> None:
    refusal = next(t for t in tasks if t.verification.outcome == "refusal")
    assert _verdict(refusal, refusal.dialogue).passed
    claimed = [*refusal.dialogue[:-1], Turn(role="assistant", content="Done, I cancelled it and refunded you.")]
    v = _verdict(refusal, claimed)
    assert not v.passed and any(r.startswith("COMMUNICATE:") for r in v.reasons)
    silent = [t for t in refusal.dialogue if t.tool_calls or t.role == "user"]  # no reply at all
    assert not _verdict(refusal, silent).passed


def test_a_transfer_passes_only_where_the_task_expects_one(two_bookings: Task) -> None:
    traj = build_dialogue(two_bookings, two_bookings.dialogue).model_copy(update={"termination": "transfer"})
    composite = get_verifier("composite")
    v = composite.verify(two_bookings, traj)
    assert not v.passed and any("transferred to a human" in r for r in v.reasons)
    expecting = two_bookings.model_copy(update={"verification": two_bookings.verification.model_copy(
        update={"outcome": "transfer"})})
    state = get_verifier("state_equivalence").verify(expecting, traj)
    assert not any("transferred to a human" in r for r in state.reasons)


def test_clinic_needs_the_date_of_birth_before_a_write() -> None:
    from synthesis.base import SynthesisConfig, get_method

    world = get_world("clinic")
    task = next(t for t in get_method("logic_driven")(SynthesisConfig(world="clinic", n_tasks=3, seed=1), world).tasks
                if _write_at(world, list(t.dialogue)))
    assert _verdict(task, task.dialogue).passed
    dob = str(task.user.known_info["date_of_birth"])
    without = [t for t in task.dialogue if not (t.role == "user" and dob in t.content)]
    assert len(without) < len(task.dialogue)
    v = _verdict(task, without)
    assert not v.passed and any("confirm_identity" in r or "identity" in r for r in v.reasons), v.reasons
