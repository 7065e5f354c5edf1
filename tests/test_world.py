"""The airline world: every compiled rule rejects its violating probe and admits its valid
probe, side effects apply, tool errors are structured, states hash and diff correctly."""

from __future__ import annotations

import pytest

from data.records import ToolCall
from envs import state as st
from envs.world import Env, World

FIXTURE = """
INSERT INTO meta VALUES ('now', '2026-05-10 12:00:00');
INSERT INTO users VALUES ('u1', 'Uma One', 'u1@example.com', 'regular'), ('u2', 'Ugo Two', 'u2@example.com', 'gold');
INSERT INTO payment_methods VALUES ('cc1', 'u1', 'credit_card', '1111', NULL), ('gc1', 'u1', 'gift_card', NULL, 300),
                                   ('cc2', 'u2', 'credit_card', '2222', NULL);
INSERT INTO flights VALUES
 ('F0', 'HAT100', 'SFO', 'JFK', '2026-05-09', '07:30', 'scheduled', 10, 80, 100, 250),
 ('F1', 'HAT100', 'SFO', 'JFK', '2026-05-12', '07:30', 'scheduled', 2, 80, 100, 250),
 ('F2', 'HAT100', 'SFO', 'JFK', '2026-05-13', '07:30', 'scheduled', 10, 80, 100, 250),
 ('F3', 'HAT100', 'SFO', 'JFK', '2026-05-14', '07:30', 'cancelled', 10, 80, 100, 250),
 ('F4', 'HAT200', 'LAX', 'SEA', '2026-05-12', '12:15', 'scheduled', 10, 80, 100, 250),
 ('F5', 'HAT100', 'SFO', 'JFK', '2026-05-15', '07:30', 'scheduled', 10, 80, 120, 250);
INSERT INTO reservations VALUES
 ('RA', 'u1', 'F2', 'economy', 1, 'cc1', 0, 0, 100, 'active', '2026-05-10 00:00:00'),
 ('RB', 'u1', 'F4', 'economy', 1, 'cc1', 0, 0, 100, 'active', '2026-05-08 08:00:00'),
 ('RC', 'u1', 'F1', 'basic_economy', 1, 'cc1', 0, 0, 80, 'active', '2026-05-10 10:00:00'),
 ('RD', 'u1', 'F0', 'economy', 1, 'cc1', 1, 0, 130, 'active', '2026-05-07 10:00:00'),
 ('RE', 'u2', 'F2', 'economy', 1, 'cc2', 0, 0, 100, 'active', '2026-05-10 11:00:00');
UPDATE reservations SET status = 'cancelled' WHERE reservation_id = 'RE';
UPDATE flights SET status = 'departed' WHERE flight_id = 'F0';
"""


def book(user: str, flight: str, pax: int, pay: str, cabin: str = "economy") -> ToolCall:
    return ToolCall(name="book_reservation", arguments={
        "user_id": user, "flight_id": flight, "cabin": cabin, "passengers": pax, "payment_id": pay})


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, arguments=args)


# rule id -> (violating probe, valid probe)
PROBES = {
    "R01_FLIGHT_BOOKABLE": (book("u2", "F3", 1, "cc2"), book("u2", "F2", 1, "cc2")),
    "R02_SEATS": (book("u2", "F1", 2, "cc2"), book("u2", "F1", 1, "cc2")),  # 1 seat left
    "R03_PAYMENT_OWNER": (book("u2", "F2", 1, "cc1"), book("u2", "F2", 1, "cc2")),
    "R04_BALANCE": (book("u1", "F5", 3, "gc1"), book("u1", "F5", 2, "gc1")),
    "R05_PASSENGERS": (book("u2", "F2", 6, "cc2"), book("u2", "F2", 5, "cc2")),
    "R06_CANCEL_WINDOW": (call("cancel_reservation", reservation_id="RB"),
                          call("cancel_reservation", reservation_id="RA")),
    "R07_CANCELLED_FINAL": (call("update_baggage", reservation_id="RE", total_bags=1),
                            call("update_baggage", reservation_id="RA", total_bags=1)),
    "R08_BASIC_NO_CHANGE": (call("change_flight", reservation_id="RC", new_flight_id="F2"),
                            call("change_flight", reservation_id="RA", new_flight_id="F5")),
    "R09_SAME_ROUTE": (call("change_flight", reservation_id="RA", new_flight_id="F4"),
                       call("change_flight", reservation_id="RA", new_flight_id="F1")),
    "R10_BAG_LIMIT": (call("update_baggage", reservation_id="RA", total_bags=4),
                      call("update_baggage", reservation_id="RA", total_bags=3)),
    "R11_NO_DUPLICATE": (book("u1", "F2", 1, "cc1"), book("u1", "F5", 1, "cc1")),
    "R12_DEPARTED": (call("cancel_reservation", reservation_id="RD"),
                     call("cancel_reservation", reservation_id="RA")),
}


@pytest.fixture()
def env(airline: World) -> Env:
    conn = airline.empty_state()
    conn.executescript(FIXTURE)
    return Env(airline, conn)


def test_every_compiled_rule_has_probes(airline: World) -> None:
    assert len(airline.compiled_rules()) >= 6
    assert set(airline.compiled_rules()) == set(PROBES)


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


def test_side_effects_of_booking_and_cancelling(env: Env) -> None:
    seats = lambda fid: env.conn.execute("SELECT seats_available FROM flights WHERE flight_id=?", (fid,)).fetchone()[0]  # noqa: E731
    balance = lambda: env.conn.execute("SELECT balance FROM payment_methods WHERE payment_id='gc1'").fetchone()[0]  # noqa: E731
    assert env.call(book("u1", "F5", 2, "gc1")).ok
    assert seats("F5") == 8 and balance() == 300 - 240
    before = seats("F2")
    assert env.call(call("cancel_reservation", reservation_id="RA")).ok
    assert seats("F2") == before + 1
    # bags beyond the free allowance cost 50 each (regular member: none free)
    res = env.call(call("update_baggage", reservation_id="RB", total_bags=2))
    assert res.ok and '"total_paid": 200' in res.content


def test_tool_errors_are_structured(env: Env) -> None:
    assert env.call(call("fly_me_to_the_moon")).error == "unknown_tool"
    obs = env.call(call("get_user_details", user="u1"))
    assert obs.error == "bad_arguments" and obs.code == "unknown_argument"
    obs = env.call(call("get_user_details"))
    assert obs.error == "bad_arguments" and obs.code == "missing_argument"
    obs = env.call(book("u1", "F5", "two", "cc1"))  # type: ignore[arg-type]
    assert obs.error == "bad_arguments" and obs.code == "wrong_type"
    obs = env.call(call("get_reservation_details", reservation_id="NOPE"))
    assert obs.error == "tool_error" and obs.code == "NOT_FOUND"
    assert env.call(book("u2", "F2", "2", "cc2")).ok  # a lossless string-to-int is accepted


def test_tool_schemas_come_from_signatures_and_docstrings(airline: World) -> None:
    assert len(airline.tools) >= 8
    schema = airline.tools["book_reservation"].schema()["function"]
    props = schema["parameters"]["properties"]
    assert schema["parameters"]["required"] == ["user_id", "flight_id", "cabin", "passengers", "payment_id"]
    assert props["cabin"]["enum"] == ["basic_economy", "economy", "business"]
    assert props["passengers"]["type"] == "integer" and props["insurance"]["type"] == "boolean"
    assert "Number of passengers" in props["passengers"]["description"]
    assert "R02" in schema["description"]
    writes = {n for n, t in airline.tools.items() if t.write}
    assert writes == {"book_reservation", "cancel_reservation", "update_baggage", "change_flight"}


def test_state_hash_diff_and_snapshots(env: Env) -> None:
    h0 = env.state_hash()
    snap = env.snapshot()
    copy = st.restore(snap)
    assert st.state_hash(copy) == h0
    assert env.call(call("update_baggage", reservation_id="RA", total_bags=2)).ok
    assert env.state_hash() != h0 and st.state_hash(copy) == h0  # copies are independent
    changes = st.diff_states(copy, env.conn)
    cells = {(c.table, c.column) for c in changes}
    assert ("reservations", "bags") in cells and ("reservations", "total_paid") in cells
    assert all(c.op == "update" for c in changes)
    # read-only calls never change the hash
    env.call(call("search_flights", origin="SFO", destination="JFK", date="2026-05-13"))
    assert st.state_hash(st.restore(env.snapshot())) == env.state_hash()


def test_generator_is_seeded_and_scales(airline: World) -> None:
    a, b = airline.build_state(3, 30), airline.build_state(3, 30)
    assert st.state_hash(a) == st.state_hash(b)
    assert st.state_hash(airline.build_state(4, 30)) != st.state_hash(a)
    rows = lambda c: sum(c.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in st.tables(c))  # noqa: E731
    assert 150 <= rows(a) <= 600
    assert rows(airline.build_state(3, 120)) > 2 * rows(a)
    for seed in (7, 11):  # regression: a user drew the same flight twice (R11) at scale >= 100
        assert rows(airline.build_state(seed, 300)) > rows(a)
