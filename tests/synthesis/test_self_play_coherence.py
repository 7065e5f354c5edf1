"""Self-play tasks as conversations (issue 16 §3): whose records a call touches (on the
database), one user's view for drawing, the user's identity and words, the drops of an
incoherent generation, answers checked by facts, transfers only at the end, the
calculator cap. The figures over 40 tasks per world are in `test_self_play_worlds.py`."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence

import pytest

from data.records import ToolCall
from data.self_play import Generation, Spec
from envs.conversation import leaked_ids, user_words
from envs.ownership import call_owners, ownable, owners, scoped
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


def test_owners_follow_foreign_keys() -> None:
    airline, telecom = get_world("airline"), get_world("telecom")
    conn = airline.build_state(0, 30)
    rid, uid = _one(conn, "SELECT reservation_id, user_id FROM reservations LIMIT 1")
    pid, other = _one(conn, "SELECT payment_id, user_id FROM payment_methods WHERE user_id <> ? LIMIT 1", uid)
    (fid,) = _one(conn, "SELECT flight_id FROM flights LIMIT 1")
    assert ownable(conn) == ["payment_methods", "reservations", "users"]
    assert call_owners(conn, [ToolCall(name="get_reservation_details", arguments={"reservation_id": rid})]) == {uid}
    assert call_owners(conn, [ToolCall(name="get_flight_details", arguments={"flight_id": fid})]) == set()  # shared
    assert call_owners(conn, [ToolCall(name="transfer_to_human_agents",  # ids inside free text count
                                       arguments={"summary": f"User {other} disputes {rid}"})]) == {uid, other}
    view = scoped(conn, uid)
    assert {r[0] for r in view.execute("SELECT user_id FROM reservations")} == {uid}
    assert view.execute("SELECT COUNT(*) FROM flights").fetchone() == conn.execute("SELECT COUNT(*) FROM flights"
                                                                                   ).fetchone()
    assert view.execute("SELECT 1 FROM payment_methods WHERE payment_id = ?", (pid,)).fetchone() is None
    view.close()
    conn.close()
    conn = telecom.build_state(0, 30)
    bill, cid = _one(conn, "SELECT bill_id, customer_id FROM bills WHERE status = 'open' LIMIT 1")
    method, other = _one(conn, "SELECT method_id, customer_id FROM payment_methods WHERE customer_id <> ? LIMIT 1", cid)
    pay = ToolCall(name="pay_bill", arguments={"bill_id": bill, "method_id": method, "amount": 1})
    assert call_owners(conn, [pay]) == {cid, other}  # a bill paid with another account's card
    (phone,) = _one(conn, "SELECT phone_number FROM lines WHERE customer_id = ? LIMIT 1", cid)
    assert call_owners(conn, [ToolCall(name="find_line_by_number", arguments={"phone_number": phone})]) == {cid}
    row = dict(zip(["line_id", "addon_id"], _one(conn, "SELECT line_id, addon_id FROM line_addons LIMIT 1"),
                   strict=True))
    (holder,) = _one(conn, "SELECT customer_id FROM lines WHERE line_id = ?", row["line_id"])
    assert owners(conn, "line_addons", row) == {holder}
    conn.close()


def test_the_user_says_records_in_their_own_words() -> None:
    airline = get_world("airline")
    conn = airline.build_state(0, 30)
    pid, last4 = _one(conn, "SELECT payment_id, last4 FROM payment_methods WHERE kind = 'credit_card' LIMIT 1")
    fid, number = _one(conn, "SELECT flight_id, flight_number FROM flights LIMIT 1")
    text = user_words(airline, conn, f"Book {fid} for me and charge {pid}.")
    assert leaked_ids(airline, conn, [text]) == [] and last4 in text and f"flight {number} on " in text
    conn.close()
    clinic = get_world("clinic")
    conn = clinic.build_state(0, 30)
    slot, name = _one(conn, "SELECT s.slot_id, p.name FROM slots s JOIN providers p USING (provider_id) LIMIT 1")
    text = user_words(clinic, conn, f"Please book {slot}.")
    assert slot not in text and name in text
    conn.close()


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


class _Calculator:
    """The scripted generator asked for calculator questions only."""

    name = "scripted"

    def __init__(self, world: World) -> None:
        self.inner = ScriptedGenerator(world)
        self.notes = self.inner.notes
        self.spec = Spec(world.name, 1, ["calculate"], [world.tools["calculate"].schema()])

    def __call__(self, specs: Sequence[Spec], conn: sqlite3.Connection, rng: random.Random) -> list[str | None]:
        return [self.inner.generate(self.spec, conn, rng) for _ in specs]


@pytest.mark.parametrize(("share", "kept"), [(0.1, 2), (0.0, 0), (0.5, 10)])
def test_calculator_questions_are_capped(airline: World, share: float, kept: int) -> None:
    cfg = SynthesisConfig(method="self_play", n_tasks=20, seed=3,
                          options={"max_calculator_share": share, "max_attempts": 30})
    result = synthesize_with(cfg, airline, _Calculator(airline))
    assert len(result.tasks) == kept and result.drops["calculator_cap"] >= 30 - 20  # the rest was drawn and capped
    assert all(t.verification.outcome == "answer" and t.verification.communicate for t in result.tasks)


def test_scripted_self_play_targets_every_write_tool():
    """Specs lean towards write tools no accepted task has yet (`cover_write_tools`), so
    twenty tasks cover each world's write tools (issue 16 §2)."""
    from envs.registry import get_world
    from synthesis.base import SynthesisConfig, get_method

    for name in ("airline", "retail"):
        world = get_world(name)
        cfg = SynthesisConfig(method="self_play", world=name, n_tasks=20, seed=0)
        tasks = get_method("self_play")(cfg, world).tasks
        used = {c.name for t in tasks for c in t.reference_solution}
        assert {t for t, spec in world.tools.items() if spec.write} <= used, name
