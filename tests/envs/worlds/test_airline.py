"""The airline world: every compiled rule rejects its violating probe and admits its valid
probe, bookings and cancellations have their side effects, its tool schemas come from the
signatures, and its generator is seeded and scales."""

from __future__ import annotations

import pytest

from envs import state as st
from envs.world import Env, World
from envs.worlds.airline.probes import PROBES, book, call


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


def test_generator_is_seeded_and_scales(airline: World) -> None:
    a, b = airline.build_state(3, 30), airline.build_state(3, 30)
    assert st.state_hash(a) == st.state_hash(b)
    assert st.state_hash(airline.build_state(4, 30)) != st.state_hash(a)
    rows = lambda c: sum(c.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in st.tables(c))  # noqa: E731
    assert 150 <= rows(a) <= 600
    assert rows(airline.build_state(3, 120)) > 2 * rows(a)
    for seed in (7, 11):  # regression: a user drew the same flight twice (R11) at scale >= 100
        assert rows(airline.build_state(seed, 300)) > rows(a)
