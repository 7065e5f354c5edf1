"""The worlds' ledgers: every successful write leaves a row, a failed one none; detours that
end where they started (bags 6 -> 0 -> 6, a flight changed away and back, a wrong address then
the right one, a charge then its refund, cancel and rebook) reach the target's main tables
but fail state equivalence and lose dense reward; independent writes still commute."""

from __future__ import annotations

import json
from typing import Any

import pytest

from data.records import StateRef, Task, ToolCall, UserScenario
from envs import state as st
from envs.probes import fixture_env, load_probes
from envs.registry import get_world
from envs.world import Env, World
from verifiers.state import StateScore, score_calls, score_calls_full

WORLDS = ["airline", "retail", "telecom", "clinic"]


def call(name: str, **args: Any) -> ToolCall:
    return ToolCall(name=name, arguments=args)


def ledger(env: Env) -> list[tuple]:
    return env.conn.execute("SELECT ref, event, amount, detail, n FROM ledger ORDER BY 1, 2, 3, 4, 5").fetchall()


# -- every write leaves a row, a failed one none ---------------------------------------------

# Successful calls on the probe fixture for the write tools no valid probe exercises.
EXTRA_VALID = {
    "telecom": [call("remove_addon", line_id="L2", addon_id="ad_call"), call("terminate_line", line_id="L5")],
    "clinic": [call("pay_balance", patient_id="p_owes", amount=20)],
}


@pytest.mark.parametrize("name", WORLDS)
def test_every_write_tool_appends_to_the_ledger(name: str) -> None:
    world = get_world(name)
    probes = load_probes(world)
    assert probes is not None
    valid = [p.valid for p in probes.probes if p.valid is not None] + EXTRA_VALID.get(name, [])
    base = fixture_env(world, probes.fixture)
    before = ledger(base)
    covered: set[str] = set()
    try:
        for c in valid:
            if not world.tools[c.name].write:
                continue
            env = base.fork()
            obs = env.call(c)
            after = ledger(env)
            env.close()
            assert obs.ok, (c, obs.content)
            new = sorted(set(after) - set(before))
            assert new and set(before) <= set(after), f"{c.name} left no ledger row"
            covered.add(c.name)
    finally:
        base.close()
    assert covered == {n for n, t in world.tools.items() if t.write}


def test_a_write_that_fails_after_logging_rolls_its_ledger_rows_back() -> None:
    """place_order inserts the order (logged as placed) before its items; an item over the
    stock (R02) aborts the call and the savepoint takes the ledger row back with it."""
    world = get_world("retail")
    probes = load_probes(world)
    assert probes is not None
    env = fixture_env(world, probes.fixture)
    try:
        before, h0 = ledger(env), env.state_hash()
        obs = env.call(call("place_order", customer_id="c1", variant_ids=["V1a", "V1b"], quantities=[1, 4],
                            payment_id="cc1"))
        assert obs.code == "R02_STOCK"
        assert ledger(env) == before and env.state_hash() == h0
        assert env.call(call("place_order", customer_id="c1", variant_ids=["V1a", "V1b"], quantities=[1, 3],
                             payment_id="cc1")).ok
        assert [r[1] for r in set(ledger(env)) - set(before)] == ["placed"]
    finally:
        env.close()


def test_no_change_call_leaves_no_row() -> None:
    """update_baggage to the count already there changes nothing, so it records nothing
    (the other worlds' tools refuse such a call with NO_CHANGE)."""
    world = get_world("airline")
    probes = load_probes(world)
    assert probes is not None
    env = fixture_env(world, probes.fixture)
    try:
        h0 = env.state_hash()
        assert env.call(call("update_baggage", reservation_id="RA", total_bags=0)).ok
        assert env.state_hash() == h0
    finally:
        env.close()


def test_late_cancellation_fee_is_logged_with_its_amount() -> None:
    world = get_world("clinic")
    probes = load_probes(world)
    assert probes is not None
    env = fixture_env(world, probes.fixture)
    try:
        before = set(ledger(env))
        assert env.call(call("cancel_appointment", appointment_id="A23", accept_late_fee=True)).ok
        new = {r[1]: r for r in set(ledger(env)) - before}
        assert set(new) == {"cancelled", "late_fee"} and new["late_fee"][2] > 0
        (fee,) = env.conn.execute("SELECT late_fee FROM appointments WHERE appointment_id = 'A23'").fetchone()
        assert new["late_fee"][2] == fee
    finally:
        env.close()


# -- detours and order ------------------------------------------------------------------------

def _task(world: World, ref: StateRef, calls: list[ToolCall]) -> Task:
    """A task whose target is what `calls` (all of which must succeed) make of `ref`."""
    env = world.env(ref)
    try:
        before = st.canonical_dump(env.conn)
        for c in calls:
            obs = env.call(c)
            assert obs.ok, (c, obs.content)
        after = st.canonical_dump(env.conn)
    finally:
        env.close()
    return Task(world=world.name, method="test", instruction="-", initial_state=ref,
                user=UserScenario(persona="-", reason="-", task_instructions="-"),
                target_state_hash=st.hash_dump(after), reference_solution=calls,
                target_diff=[c.as_dict() for c in st.diff_dumps(before, after)]).with_id()


def _final(world: World, ref: StateRef, calls: list[ToolCall]) -> st.Dump:
    env = world.env(ref)
    try:
        for c in calls:
            obs = env.call(c)
            assert obs.ok, (c, obs.content)
        return st.canonical_dump(env.conn)
    finally:
        env.close()


def _main(dump: st.Dump) -> st.Dump:
    return {t: rows for t, rows in dump.items() if t != "ledger"}


def _first_ok(world: World, ref: StateRef, candidates: list[list[ToolCall]]) -> list[ToolCall]:
    """The first candidate sequence whose calls all succeed on a fresh copy of `ref`."""
    for calls in candidates:
        env = world.env(ref)
        try:
            if all(env.call(c).ok for c in calls):
                return calls
        finally:
            env.close()
    raise AssertionError("no candidate succeeds in this state")


def _returned(world: World, ref: StateRef, calls: list[ToolCall], key: str) -> Any:
    """`key` of the last call's result, replayed on a fresh copy of `ref`."""
    env = world.env(ref)
    try:
        obs = None
        for c in calls:
            obs = env.call(c)
            assert obs.ok
        assert obs is not None
        return json.loads(obs.content)[key]
    finally:
        env.close()


def _scores(task: Task, calls: list[ToolCall]) -> StateScore:
    fast, full = score_calls(task, calls), score_calls_full(task, calls)
    assert (fast.exact, fast.reward, fast.final_hash) == (full.exact, full.reward, full.final_hash)
    return fast


def _airline_case(world: World) -> tuple[StateRef, dict[str, Any]]:
    """An active economy or business reservation of 2+ passengers (a regular member's, so
    every bag costs) on a scheduled flight, another scheduled flight on its route with room,
    and a user with a credit card and flights to book."""
    ref = world.state_ref(3, 30)
    conn = world.build_state(3, 30)
    try:
        rows = conn.execute(
            "SELECT r.reservation_id, r.flight_id, r.bags, r.passengers, o.flight_id FROM reservations r"
            " JOIN users u ON u.user_id = r.user_id JOIN flights f ON f.flight_id = r.flight_id JOIN flights o ON o.origin = f.origin"
            " AND o.destination = f.destination AND o.flight_id <> f.flight_id"
            " WHERE r.status = 'active' AND r.cabin <> 'basic_economy' AND r.passengers >= 2"
            " AND f.status = 'scheduled' AND o.status = 'scheduled' AND o.seats_available >= r.passengers"
            " ORDER BY u.membership <> 'regular', r.reservation_id").fetchall()
        assert rows, "seed 3 has no changeable reservation"
        rid, flight, bags, pax, other = rows[0]
        user, card = conn.execute("SELECT user_id, payment_id FROM payment_methods WHERE kind = 'credit_card'"
                                  " ORDER BY payment_id LIMIT 1").fetchone()
        free = [r[0] for r in conn.execute(
            "SELECT flight_id FROM flights WHERE status = 'scheduled' AND seats_available >= 1 AND flight_id NOT IN"
            " (SELECT flight_id FROM reservations WHERE user_id = ?) ORDER BY flight_id", (user,))]
    finally:
        conn.close()
    return ref, {"rid": rid, "flight": flight, "bags": bags, "pax": pax, "other": other, "user": user,
                 "card": card, "free": free}


def _bags(rid: str, n: int) -> ToolCall:
    return call("update_baggage", reservation_id=rid, total_bags=n)


def _book(c: dict[str, Any], flight: str) -> ToolCall:
    return call("book_reservation", user_id=c["user"], flight_id=flight, cabin="economy", passengers=1,
                payment_id=c["card"])


def _detour_cases() -> list[tuple[str, str]]:
    return [("airline", "bags_6_0_6"), ("airline", "flight_away_and_back"), ("airline", "charge_then_refund"),
            ("retail", "wrong_then_right_address"), ("telecom", "addon_added_and_removed")]


def _detour(name: str, kind: str) -> tuple[World, StateRef, list[ToolCall], list[ToolCall]]:
    """(world, initial state, clean path, detour reaching the same main tables)."""
    world = get_world(name)
    if name == "airline":
        ref, c = _airline_case(world)
        rid = c["rid"]
        six = 6 if c["bags"] != 6 else 5  # 2+ passengers: up to 6 bags (R10)
        if kind == "bags_6_0_6":
            return world, ref, [_bags(rid, six)], [_bags(rid, six), _bags(rid, 0), _bags(rid, six)]
        if kind == "flight_away_and_back":
            clean = [_bags(rid, six)]
            away = call("change_flight", reservation_id=rid, new_flight_id=c["other"])
            back = call("change_flight", reservation_id=rid, new_flight_id=c["flight"])
            return world, ref, clean, [away, back, *clean]
        clean = [_book(c, c["free"][0])]  # charge_then_refund: a bag fee charged, then refunded
        return world, ref, clean, [*clean, _bags(rid, c["bags"] + 2), _bags(rid, c["bags"])]
    ref = world.state_ref(3, 30)
    conn = world.build_state(3, 30)
    try:
        if name == "retail":
            (oid,) = conn.execute("SELECT order_id FROM orders WHERE status IN ('pending', 'processed')"
                                        " ORDER BY order_id LIMIT 1").fetchone()
            right = call("modify_order_address", order_id=oid, address="12 Elm Street, Springfield")
            wrong = call("modify_order_address", order_id=oid, address="21 Elm Street, Springfield")
            return world, ref, [right], [wrong, right]
        lines = [r[0] for r in conn.execute("SELECT line_id FROM lines WHERE status = 'active' ORDER BY line_id")]
        addons = [r[0] for r in conn.execute("SELECT addon_id FROM addons WHERE kind IN ('data', 'calls')"
                                             " ORDER BY addon_id")]
    finally:
        conn.close()
    pairs = [(ln, a, b) for ln in lines for a in addons for b in addons if a != b]
    clean = _first_ok(world, ref, [[call("add_addon", line_id=ln, addon_id=a), call("add_addon", line_id=ln,
                                                                                  addon_id=b)]
                                   for ln, a, b in pairs])
    ln, a, b = clean[0].arguments["line_id"], clean[0].arguments["addon_id"], clean[1].arguments["addon_id"]
    clean = [call("add_addon", line_id=ln, addon_id=a)]
    return world, ref, clean, [call("add_addon", line_id=ln, addon_id=b), call("remove_addon", line_id=ln,
                                                                                addon_id=b), *clean]


@pytest.mark.parametrize(("name", "kind"), _detour_cases(), ids=[f"{w}-{k}" for w, k in _detour_cases()])
def test_a_detour_reaches_the_main_tables_but_fails(name: str, kind: str) -> None:
    world, ref, clean, detour = _detour(name, kind)
    task = _task(world, ref, clean)
    target = _final(world, ref, clean)
    reached = _final(world, ref, detour)
    assert _main(reached) == _main(target), "the detour should end where the clean path does"
    assert set(reached["ledger"]) - set(target["ledger"]), "the detour's events should stay on record"
    good, bad = _scores(task, clean), _scores(task, detour)
    assert good.exact and good.reward == 1.0
    assert not bad.exact and bad.reward < good.reward
    assert bad.extra_writes > 0  # the ledger rows the detour left are cells the target did not change


def test_cancel_and_rebook_fails_in_airline_and_clinic() -> None:
    # airline: book a flight; the detour books it, cancels that booking and books it again
    world = get_world("airline")
    ref, c = _airline_case(world)
    book = _book(c, c["free"][0])
    rid = _returned(world, ref, [book], "reservation_id")
    task = _task(world, ref, [book])
    detour = [book, call("cancel_reservation", reservation_id=rid), book]
    bad = _scores(task, detour)
    assert _scores(task, [book]).exact and not bad.exact and bad.reward < 1.0
    rows = {(r["event"], r["n"]) for r in _final(world, ref, detour)["ledger"].values() if r["ref"] == rid}
    assert rows == {("booked", 0), ("cancelled", 0)}  # and the second booking is logged under its new id
    # clinic: the same with an appointment (more than 24 hours ahead: no late fee)
    world = get_world("clinic")
    ref = world.state_ref(3, 30)
    conn = world.build_state(3, 30)
    try:
        now = conn.execute("SELECT value FROM meta WHERE key = 'now'").fetchone()[0]
        slots = [r[0] for r in conn.execute(
            "SELECT s.slot_id FROM slots s JOIN providers p USING (provider_id) WHERE s.status = 'open'"
            " AND p.specialty = 'primary_care' AND s.start_at > datetime(?, '+2 days') ORDER BY s.slot_id LIMIT 20",
            (now,))]
        patients = [r[0] for r in conn.execute("SELECT patient_id FROM patients ORDER BY patient_id LIMIT 20")]
    finally:
        conn.close()
    book = _first_ok(world, ref, [[call("book_appointment", patient_id=p, slot_id=s, appointment_type="sick_visit")]
                                  for s in slots for p in patients])[0]
    aid = _returned(world, ref, [book], "appointment_id")
    task = _task(world, ref, [book])
    detour = [book, call("cancel_appointment", appointment_id=aid), book]
    bad = _scores(task, detour)
    assert not bad.exact and bad.reward < 1.0 and bad.extra_writes > 0


def _independent(name: str) -> tuple[World, StateRef, list[ToolCall]]:
    world = get_world(name)
    ref = world.state_ref(3, 30)
    conn = world.build_state(3, 30)
    try:
        if name == "airline":
            _, c = _airline_case(world)
            return world, ref, [_book(c, c["free"][0]), _book(c, c["free"][1])]
        if name == "retail":
            cust, pay = conn.execute("SELECT customer_id, payment_id FROM payment_methods WHERE kind = 'credit_card'"
                                     " ORDER BY payment_id LIMIT 1").fetchone()
            variants = [r[0] for r in conn.execute("SELECT variant_id FROM variants WHERE stock >= 2"
                                                   " ORDER BY variant_id LIMIT 2")]
            return world, ref, [call("place_order", customer_id=cust, variant_ids=[v], quantities=[1], payment_id=pay)
                                for v in variants]
        if name == "telecom":
            lines = [r[0] for r in conn.execute("SELECT line_id FROM lines WHERE status = 'active' ORDER BY line_id")]
            addons = [r[0] for r in conn.execute("SELECT addon_id FROM addons WHERE kind = 'data' ORDER BY addon_id")]
            cands = [[call("add_addon", line_id=a, addon_id=x), call("add_addon", line_id=b, addon_id=x)]
                     for a in lines for b in lines if a < b for x in addons]
            return world, ref, _first_ok(world, ref, cands[:400])
        now = conn.execute("SELECT value FROM meta WHERE key = 'now'").fetchone()[0]
        slots = [r[0] for r in conn.execute(
            "SELECT s.slot_id FROM slots s JOIN providers p USING (provider_id) WHERE s.status = 'open'"
            " AND p.specialty = 'primary_care' AND s.start_at > datetime(?, '+2 days') ORDER BY s.slot_id LIMIT 12",
            (now,))]
        patients = [r[0] for r in conn.execute("SELECT patient_id FROM patients ORDER BY patient_id LIMIT 12")]
    finally:
        conn.close()
    cands = [[call("book_appointment", patient_id=p, slot_id=s1, appointment_type="sick_visit"),
              call("book_appointment", patient_id=q, slot_id=s2, appointment_type="sick_visit")]
             for p in patients for q in patients if p < q for s1 in slots[:3] for s2 in slots[3:6]]
    return world, ref, _first_ok(world, ref, cands)


@pytest.mark.parametrize("name", WORLDS)
def test_independent_writes_in_reverse_order_still_pass(name: str) -> None:
    world, ref, calls = _independent(name)
    task = _task(world, ref, calls)
    assert any(c["table"] == "ledger" for c in task.target_diff)
    reverse = list(reversed(calls))
    assert _scores(task, reverse).exact, "independent writes must commute, ledger included"
