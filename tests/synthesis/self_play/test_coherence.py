"""`synthesis.self_play.coherence`: a valid generation as a conversation one user can have:
their identity (the world's identity keys), the drops of an incoherent generation by reason,
answers checked by facts and transfers only at the end."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence

import pytest

from data.records import ToolCall
from data.self_play import Generation, Spec
from envs.registry import get_world
from envs.world import World
from synthesis.base import SynthesisConfig, get_method
from synthesis.dialogue import play
from synthesis.self_play import ScriptedGenerator, synthesize_with, validate_on_world
from synthesis.self_play.coherence import as_conversation, identity_for
from verifiers.composite import CompositeVerifier


def _one(conn: sqlite3.Connection, sql: str, *args: object) -> tuple:
    row = conn.execute(sql, args).fetchone()
    assert row is not None, sql
    return row


@pytest.mark.parametrize(("name", "keys"), [("airline", {"user_id"}), ("retail", {"email", "name", "zip code"}),
                                            ("telecom", {"customer_id"}), ("clinic", {"patient_id", "date_of_birth"})])
def test_identity_is_the_worlds_identity_keys(name: str, keys: set[str]) -> None:
    world = get_world(name)
    ref = world.state_ref(0, 30)
    conn = world.build_state(0, 30)
    table, key = {"airline": ("users", "user_id"), "clinic": ("patients", "patient_id")}.get(
        name, ("customers", "customer_id"))
    (account,) = _one(conn, f"SELECT {key} FROM {table} LIMIT 1 OFFSET 3")
    conn.close()
    found = identity_for(world, ref, account)
    assert found is not None
    known, lookup = found
    assert set(known) == keys and lookup.name in world.tools and not world.tools[lookup.name].write
    assert identity_for(world, ref, "nobody_at_all") is None


def test_a_user_who_forgot_their_email_identifies_by_name_and_zip() -> None:
    """"I'm Ana Silva, zip code 37242, and I forgot my email": the user knows no email, the
    agent asks for none, and the reference finds them by name and zip code first."""
    world = get_world("retail")
    tasks = get_method("self_play")(SynthesisConfig(method="self_play", world="retail", n_tasks=12, seed=0),
                                    world).tasks
    forgot = [t for t in tasks if "forgot my email" in t.instruction]
    assert forgot
    for task in forgot:
        assert "email" not in task.user.known_info and {"name", "zip code"} <= set(task.user.known_info)
        assert task.reference_solution[0].name == "find_customer_by_name_zip"
        assert "email" not in " ".join(t.content for t in task.dialogue if t.role == "assistant").lower()


class _Texts:
    """A generator that writes given texts (a model's), in turn."""

    name = "model"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.i = 0

    def __call__(self, specs: Sequence[Spec], conn: sqlite3.Connection, rng: random.Random) -> list[str | None]:
        out = []
        for _ in specs:
            out.append(self.texts[self.i % len(self.texts)])
            self.i += 1
        return out


def _gen(world: World, question: str, calls: list[ToolCall]) -> Generation:
    return Generation(question=question, tools=[world.tools[c.name].schema() for c in calls], calls=calls)


def test_incoherent_generations_are_dropped_by_reason(airline: World) -> None:
    conn = airline.build_state(0, 30)
    (rid, uid) = _one(conn, "SELECT r.reservation_id, r.user_id FROM reservations r JOIN flights f USING (flight_id)"
                            " WHERE r.status = 'active' AND r.insurance = 1 AND f.status = 'scheduled' LIMIT 1")
    (other,) = _one(conn, "SELECT user_id FROM users WHERE user_id <> ? LIMIT 1", uid)
    conn.close()
    cancel = ToolCall(name="cancel_reservation", arguments={"reservation_id": rid})
    cross = _gen(airline, f"Cancel booking {rid}. Then: what tier does {other} have?",
                 [ToolCall(name="get_user_details", arguments={"user_id": other}), cancel])
    read_only = _gen(airline, f"What is in reservation {rid}?",
                     [ToolCall(name="get_reservation_details", arguments={"reservation_id": rid})])
    transfer_first = _gen(airline, f'Get me a human: "User {uid} is angry". Then: cancel {rid}.',
                          [ToolCall(name="transfer_to_human_agents", arguments={"summary": f"User {uid} is angry"}),
                           cancel])
    own = _gen(airline, f"Please cancel my reservation {rid}.", [cancel])
    cfg = SynthesisConfig(method="self_play", n_tasks=4, seed=0, options={"max_attempts": 4, "batch_size": 4})
    result = synthesize_with(cfg, airline, _Texts([g.to_text() for g in (cross, read_only, transfer_first, own)]))
    assert dict(result.drops) == {"cross_user": 1, "nothing_to_tell": 1, "transfer_not_last": 1}
    (task,) = result.tasks
    assert task.metadata["account"] == uid and task.user.known_info["user_id"] == uid
    assert task.verification.outcome == "change" and task.verification.communicate  # the refund is told
    assert [c.name for c in task.reference_solution][0] == "get_user_details"  # identified first


def test_answers_are_checked_and_transfers_end_the_conversation(airline: World) -> None:
    conn = airline.build_state(0, 30)
    rng = random.Random(1)
    gen = ScriptedGenerator(airline)
    menu = [airline.tools[n].schema() for n in ("get_reservation_details", "transfer_to_human_agents")]
    ref = airline.state_ref(0, 30)
    text = gen.generate(Spec("airline", 2, ["get_reservation_details", "transfer_to_human_agents"], menu), conn, rng)
    conn.close()
    assert text is not None
    from rollout.generation import parse_generation

    parsed = parse_generation(text)
    assert isinstance(parsed, Generation)
    note = gen.notes[text]
    assert note.answer and note.account
    task, why = as_conversation(airline, parsed, validate_on_world(airline, parsed, ref=ref), note, rng, {})
    assert task is not None, why
    assert task.verification.outcome == "transfer" and task.reference_solution[-1].name == "transfer_to_human_agents"
    assert {f.label for f in note.answer} <= {f.label for f in task.verification.communicate}
    verifier = CompositeVerifier()
    assert verifier.verify(task, play(airline, task, [t for t in task.dialogue if t.role == "assistant"])).passed
    silent = [t.model_copy(update={"tool_calls": []}) if t.tool_calls and t.tool_calls[0].name ==
              "transfer_to_human_agents" else t for t in task.dialogue if t.role == "assistant"]
    verdict = verifier.verify(task, play(airline, task, silent))  # no handover: the task is failed
    assert not verdict.passed and any("never transferred" in r for r in verdict.reasons)
    wrong = task.model_copy(update={"verification": task.verification.model_copy(update={
        "communicate": [f.model_copy(update={"any_of": ["no-such-answer"]}) for f in task.verification.communicate]})})
    assert not verifier.verify(wrong, play(airline, task, [t for t in task.dialogue if t.role == "assistant"])).passed
