"""The clinic world: every compiled rule rejects its violating probe (with exactly its rule
id) and admits its valid probe; side effects apply; every tool runs through `Env.call`;
the generator is seeded and scales; the Set Designer's kinds sit one step either side of
their rule; logic-driven synthesis emits tasks that replay to their target."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import pytest

from data.records import Task, ToolCall
from envs import state as st
from envs.design import Variant
from envs.registry import get_world, list_worlds
from envs.world import Env, World

# Bookings go in on a clock one day early (as the generator does), then time moves to now.
from envs.worlds.clinic.probes import FIXTURE, MORE_VIOLATIONS, PROBES, book, call, move, refill
from synthesis.base import SynthesisConfig, get_method
from synthesis.logic_driven import replay
from synthesis.scenario import GOAL_LEADS, goal_of


@pytest.fixture(scope="module")
def clinic() -> World:
    return get_world("clinic")


@pytest.fixture()
def env(clinic: World) -> Env:
    conn = clinic.empty_state()
    conn.executescript(FIXTURE)
    return Env(clinic, conn)


def value(env: Env, sql: str, *args: object) -> object:
    return env.conn.execute(sql, args).fetchone()[0]


def test_registered_with_policy_and_rules(clinic: World) -> None:
    assert "clinic" in list_worlds()
    compiled = clinic.compiled_rules()
    assert len(compiled) >= 8 and set(compiled) == set(PROBES)
    policy_ids = set(re.findall(r"\*\*(R\d+_[A-Z0-9_]+)\*\*", clinic.policy))
    assert len(policy_ids) >= 10 and set(compiled) <= policy_ids
    for rule in policy_ids - set(compiled):  # the rest is declared policy-only
        assert re.search(rf"\*\*{rule}\*\* \*\(policy only\)\*", clinic.policy), rule
    for rule in compiled:
        assert re.search(rf"\*\*{rule}\*\* \*\(enforced\)\*", clinic.policy), rule


@pytest.mark.parametrize("rule", sorted(PROBES))
def test_rule_rejects_violation_and_admits_valid(env: Env, rule: str) -> None:
    bad, good = PROBES[rule]
    probe = env.fork()
    before = probe.state_hash()
    obs = probe.call(bad)
    assert obs.error == "rule_violation", obs.content
    assert obs.code == rule and rule in obs.content
    assert probe.state_hash() == before  # a rejected call leaves no trace
    ok = env.fork().call(good)
    assert ok.ok, ok.content


@pytest.mark.parametrize("rule,bad", MORE_VIOLATIONS, ids=[f"{r}-{i}" for i, (r, _) in enumerate(MORE_VIOLATIONS)])
def test_compound_rule_branches(env: Env, rule: str, bad: ToolCall) -> None:
    obs = env.call(bad)
    assert obs.error == "rule_violation" and obs.code == rule, obs.content


def test_booking_and_cancelling_side_effects(env: Env) -> None:
    obs = env.call(book("p_adult", "S_CARD_15", "consultation", "REF_OK"))
    assert obs.ok, obs.content
    assert '"fee": 15' in obs.content  # the plan's copay
    assert value(env, "SELECT status FROM slots WHERE slot_id = 'S_CARD_15'") == "booked"
    assert value(env, "SELECT visits_used FROM referrals WHERE referral_id = 'REF_OK'") == 1
    aid = value(env, "SELECT appointment_id FROM appointments WHERE slot_id = 'S_CARD_15'")
    assert env.call(call("cancel_appointment", appointment_id=aid)).ok
    assert value(env, "SELECT status FROM slots WHERE slot_id = 'S_CARD_15'") == "open"
    assert value(env, "SELECT visits_used FROM referrals WHERE referral_id = 'REF_OK'") == 0
    assert value(env, "SELECT late_fee FROM appointments WHERE appointment_id = ?", aid) == 0
    # self-pay pays the type's full fee
    assert '"fee": 180' in env.call(book("p_self", "S_PC_13_0900", "annual_physical")).content


def test_late_fee_is_charged_only_under_24_hours(env: Env) -> None:
    late = env.fork()
    assert late.call(call("cancel_appointment", appointment_id="A23", accept_late_fee=True)).ok
    assert value(late, "SELECT late_fee FROM appointments WHERE appointment_id = 'A23'") == 25
    assert value(late, "SELECT balance_due FROM patients WHERE patient_id = 'p_adult'") == 25
    assert value(late, "SELECT fee_accepted FROM appointments WHERE appointment_id = 'A23'") == 0
    # at exactly 24 hours the cancellation is free, and accepting a fee changes nothing
    free, accepted = env.fork(), env.fork()
    assert free.call(call("cancel_appointment", appointment_id="A24")).ok
    assert accepted.call(call("cancel_appointment", appointment_id="A24", accept_late_fee=True)).ok
    assert free.state_hash() == accepted.state_hash()
    assert value(free, "SELECT balance_due FROM patients WHERE patient_id = 'p_adult'") == 0


def test_reschedule_refill_and_payment_side_effects(env: Env) -> None:
    assert env.call(move("B2", "S_PC2_20_0900")).ok
    assert value(env, "SELECT reschedule_count FROM appointments WHERE appointment_id = 'B2'") == 2
    assert value(env, "SELECT status FROM slots WHERE slot_id = 'S_PC2_18_0900'") == "open"
    assert value(env, "SELECT status FROM slots WHERE slot_id = 'S_PC2_20_0900'") == "booked"
    assert env.call(move("B2", "S_PC2_18_0900")).code == "R10_RESCHEDULE"  # the third move
    obs = env.call(refill("RX_FIRST"))
    assert obs.ok and '"earliest_refill_date": "2026-06-03"' in obs.content
    assert value(env, "SELECT refills_remaining FROM prescriptions WHERE rx_id = 'RX_FIRST'") == 1
    assert value(env, "SELECT last_fill_date FROM prescriptions WHERE rx_id = 'RX_FIRST'") == "2026-05-11"
    assert env.call(refill("RX_FIRST")).code == "R12_REFILL_TOO_EARLY"  # just refilled
    assert env.call(call("pay_balance", patient_id="p_owes", amount=1)).ok
    assert value(env, "SELECT balance_due FROM patients WHERE patient_id = 'p_owes'") == 150
    assert env.call(book("p_owes", "S_PC_13_0900")).ok  # back at the hold limit: booking works


def test_every_tool_through_env_call(env: Env, clinic: World) -> None:
    ok_calls = [
        call("get_patient_details", patient_id="p_adult"),
        call("search_providers", specialty="primary_care", plan_id="hmo"),
        call("get_provider_details", provider_id="dr_card"),
        call("find_open_slots", provider_id="dr_pc", date="2026-05-13"),
        call("list_appointment_types"),
        call("get_appointment_details", appointment_id="A24"),
        call("get_prescription_details", rx_id="RX_OK"),
        book("p_self", "S_PC_13_0930", "sick_visit"),
        call("cancel_appointment", appointment_id="A24"),
        move("A_SOON", "S_PC_15_1400"),
        refill("RX_OK"),
        call("pay_balance", patient_id="p_self", amount=50),
        call("transfer_to_human_agents", summary="wants a diagnosis"),
    ]
    assert {c.name for c in ok_calls} == set(clinic.tools)
    for c in ok_calls:
        obs = env.call(c)
        assert obs.ok, (c.name, obs.content)
        assert obs.wrote == clinic.tools[c.name].write
    assert '"provider_id": "dr_pc"' in env.call(call("search_providers", specialty="primary_care",
                                                       plan_id="hmo")).content
    assert "dr_pc2" not in env.call(call("search_providers", specialty="primary_care", plan_id="hmo")).content
    slots = env.call(call("find_open_slots", provider_id="dr_pc", date="2026-05-13")).content
    assert "S_PC_13_0900" in slots and "S_PC_13_1000" not in slots and "S_PC_13_0930" not in slots  # blocked, booked
    assert "consultation" in env.call(call("get_provider_details", provider_id="dr_card")).content
    # bad arguments and tool errors are structured observations
    bad = [
        ("bad_arguments", "unknown_argument", call("get_patient_details", patient="p_adult")),
        ("bad_arguments", "missing_argument", call("book_appointment", patient_id="p_self")),
        ("bad_arguments", "wrong_type", call("search_providers", specialty="neurology")),
        ("bad_arguments", "wrong_type", call("pay_balance", patient_id="p_self", amount="ten")),
        ("tool_error", "NOT_FOUND", call("get_appointment_details", appointment_id="NOPE")),
        ("tool_error", "TYPE_NOT_OFFERED", book("p_self", "S_PC_13_0900", "well_child")),
        ("tool_error", "BAD_VALUE", call("find_open_slots", provider_id="dr_pc", date="next tuesday")),
        ("unknown_tool", "unknown_tool", call("prescribe_antibiotics", patient_id="p_self")),
    ]
    for kind, code, c in bad:
        obs = env.call(c)
        assert (obs.error, obs.code) == (kind, code), (c.name, obs.content)
    for amount in (0, 10_000):
        assert env.call(call("pay_balance", patient_id="p_owes", amount=amount)).code == "BAD_VALUE"
    assert env.call(move("A_SOON", "S_PC_15_1400")).code == "NO_CHANGE"


def test_tool_schemas(clinic: World) -> None:
    assert len(clinic.tools) >= 10
    schema = clinic.tools["book_appointment"].schema()["function"]
    props = schema["parameters"]["properties"]
    assert schema["parameters"]["required"] == ["patient_id", "slot_id", "appointment_type"]
    assert props["appointment_type"]["enum"][0] == "annual_physical"
    assert props["referral_id"]["default"] is None and "referral" in props["referral_id"]["description"]
    assert all(f"R0{k}" in schema["description"] for k in range(1, 8))
    assert clinic.tools["cancel_appointment"].schema()["function"]["parameters"]["properties"][
        "accept_late_fee"]["type"] == "boolean"
    writes = {n for n, t in clinic.tools.items() if t.write}
    assert writes == {"book_appointment", "cancel_appointment", "reschedule_appointment",
                      "refill_prescription", "pay_balance"}


def _rows(conn: object) -> int:
    return sum(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in st.tables(conn))  # type: ignore[attr-defined]


def _consistent(conn: object) -> None:
    """What the triggers guard holds for the whole generated state."""
    q = conn.execute  # type: ignore[attr-defined]
    assert q("PRAGMA foreign_key_check").fetchall() == []
    assert q("""SELECT COUNT(*) FROM appointments a JOIN slots s USING (slot_id), appointments b
                JOIN slots t ON t.slot_id = b.slot_id
                WHERE a.patient_id = b.patient_id AND a.appointment_id < b.appointment_id
                  AND a.status = 'scheduled' AND b.status = 'scheduled'
                  AND s.start_at < datetime(t.start_at, '+' || t.duration_min || ' minutes')
                  AND t.start_at < datetime(s.start_at, '+' || s.duration_min || ' minutes')""").fetchone()[0] == 0
    assert q("""SELECT COUNT(*) FROM slots s WHERE s.status = 'booked' AND NOT EXISTS (SELECT 1 FROM appointments a
                WHERE a.slot_id = s.slot_id AND a.status <> 'cancelled')""").fetchone()[0] == 0
    now = q("SELECT value FROM meta WHERE key = 'now'").fetchone()[0]
    assert q("""SELECT COUNT(*) FROM appointments a JOIN slots s USING (slot_id)
                WHERE a.status = 'scheduled' AND s.start_at <= ?""", (now,)).fetchone()[0] == 0


def test_generator_is_seeded_and_consistent(clinic: World) -> None:
    a, b = clinic.build_state(3, 30), clinic.build_state(3, 30)
    assert st.state_hash(a) == st.state_hash(b)
    assert st.state_hash(clinic.build_state(4, 30)) != st.state_hash(a)
    assert 250 <= _rows(a) <= 700
    _consistent(a)
    counts = dict(a.execute("SELECT status, COUNT(*) FROM appointments GROUP BY status").fetchall())
    assert counts.get("scheduled") and counts.get("completed")
    big = clinic.build_state(3, 300)
    assert _rows(big) > 4 * _rows(a)
    _consistent(big)
    with pytest.raises(ValueError, match="scale"):
        clinic.generator.generate(clinic.empty_state(), seed=0, scale=0)


@pytest.mark.slow
def test_generator_reaches_100k_rows(clinic: World) -> None:
    conn = clinic.empty_state()
    t0 = time.perf_counter()
    conn.execute("BEGIN")
    clinic.generator.generate(conn, seed=1, scale=20_000)
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    assert _rows(conn) >= 100_000
    assert elapsed < 60, elapsed  # a few seconds on an idle machine; generous for a shared one
    _consistent(conn)


def _naive_call(variant: Variant) -> ToolCall:
    """The call a naive agent makes for the variant's request as first stated (preferred slot,
    provider or type; no late fee accepted): on a one-past kind a rule rejects it, on an
    at-the-limit kind it succeeds."""
    f, pref = variant.focus, variant.preference
    if f.get("target_rx"):
        return ToolCall(name="refill_prescription", arguments={"rx_id": f["target_rx"]})
    if f["move_slots"]:
        return ToolCall(name="reschedule_appointment",
                        arguments={"appointment_id": f["appointment_ids"][0], "new_slot_id": f["move_slots"][0]})
    if f["slot_ids"]:
        args: dict[str, Any] = {"patient_id": f["patient_id"], "slot_id": f["slot_ids"][0],
                                "appointment_type": pref.get("wanted_type", f["type_codes"][0])}
        if f["referral_ids"]:
            args["referral_id"] = f["referral_ids"][0]
        return ToolCall(name="book_appointment", arguments=args)
    return ToolCall(name="cancel_appointment", arguments={"appointment_id": f["appointment_ids"][0]})


def test_every_kind_sits_one_step_either_side_of_its_rule(clinic: World) -> None:
    """At the limit the naive request succeeds; one step past it its rule rejects it."""
    design = clinic.design
    rejected_kinds = {pair[1][0] for pair in design._PAIRS}
    covered: set[str] = set()
    for seed in (0, 1):
        base = clinic.build_state(seed, 30)
        for kind, rule, persona in design.KINDS:
            (variant,) = design.variants(base, random.Random(seed), 1, kinds=[kind])
            assert variant.kind == kind and variant.rules == [rule] and variant.persona == persona
            env = clinic.env(clinic.state_ref(seed, 30, variant.patches))
            obs = env.call(_naive_call(variant))
            if kind in rejected_kinds:
                assert obs.code == rule, (kind, obs.content)
            else:
                assert obs.ok, (kind, obs.content)
            covered.add(rule)
    assert covered == set(clinic.compiled_rules())
    assert {p for _, _, p in design.KINDS} == {"novice", "boundary", "mismatch", "entangled"}
    with pytest.raises(ValueError, match="unknown kind"):
        design.variants(base, random.Random(0), 1, kinds=["no_such_kind"])


@pytest.fixture(scope="module")
def clinic_tasks(clinic: World) -> list[Task]:
    result = get_method("logic_driven")(SynthesisConfig(world="clinic", n_tasks=20, seed=5), clinic)
    assert len(result.tasks) == 20, dict(result.drops)
    return result.tasks


def test_synthesis_emits_validated_tasks(clinic: World, clinic_tasks: list[Task]) -> None:
    for task in clinic_tasks:
        assert task.world == "clinic" and task.id == task.compute_id()
        assert replay(clinic, task) == task.target_state_hash
        assert goal_of(task).startswith(GOAL_LEADS)
    assert {t.split for t in clinic_tasks} == {"train", "test"}
    rules = {r for t in clinic_tasks for r in t.metadata["rules"]}
    assert len(rules & set(clinic.compiled_rules())) >= 10, rules
    kinds = {t.metadata["boundary"] for t in clinic_tasks}
    assert len(kinds) >= 14, kinds
    refusals = [t for t in clinic_tasks if t.target_state_hash == t.initial_state.state_hash]
    changes = [t for t in clinic_tasks if t.target_state_hash != t.initial_state.state_hash]
    assert refusals and changes  # some requests must be refused, most carried out


def test_instructions_never_reveal_ids_the_user_does_not_know(clinic: World, clinic_tasks: list[Task]) -> None:
    for task in clinic_tasks:
        ref = task.initial_state
        conn = clinic.build_state(ref.seed, ref.scale, ref.patches)
        hidden = {r[0] for sql in ("SELECT slot_id FROM slots", "SELECT provider_id FROM providers",
                                   "SELECT referral_id FROM referrals", "SELECT rx_id FROM prescriptions",
                                   "SELECT plan_id FROM insurance_plans")
                  for r in conn.execute(sql).fetchall()}
        assert not [h for h in hidden if h in task.instruction], task.instruction
        assert not any(name in task.instruction for name in clinic.tools)
        pid, dob = task.user.known_info["patient_id"], task.user.known_info["date_of_birth"]
        assert conn.execute("SELECT date_of_birth FROM patients WHERE patient_id = ?", (pid,)).fetchone() == (dob,)
        # appointment ids named in the instruction are the user's own
        for aid in re.findall(r"\bappointment ([A-Z][A-Z0-9]*\d[A-Z0-9]*)\b", task.instruction):
            owner = conn.execute("SELECT patient_id FROM appointments WHERE appointment_id = ?", (aid,)).fetchone()
            assert owner and owner[0] == task.user.known_info["patient_id"], aid


def test_constraint_guided_runs_on_clinic(clinic: World) -> None:
    # The world has CoVe hooks now (envs/worlds/clinic/constraints.py; tests/envs/test_cove.py).
    r = get_method("constraint_guided")(SynthesisConfig(world="clinic", method="constraint_guided", n_tasks=2), clinic)
    assert len(r.tasks) == 2 and all(replay(clinic, t) == t.target_state_hash for t in r.tasks)
