"""A world's live environment (`envs.world`): tool errors are structured, each call runs in
a savepoint, forks and copies are independent, watched copies hash like a full read, and the
state caches."""

from __future__ import annotations

from envs import state as st
from envs.world import Env, Recent, World, _integrity_error
from envs.worlds.airline.probes import book, call


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


def test_a_failed_call_leaves_no_trace_and_forks_are_independent(env: Env) -> None:
    before = env.state_hash()
    fork = env.fork()
    assert fork.call(call("update_baggage", reservation_id="RA", total_bags=2)).ok
    assert fork.state_hash() != before and env.state_hash() == before  # the fork only
    obs = env.call(book("u1", "F5", 99, "gc1"))  # more seats than the flight has
    assert obs.error == "rule_violation" and obs.code.startswith("R") and env.state_hash() == before
    fork.close()


def test_integrity_errors_name_the_rule_when_they_can() -> None:
    obs = _integrity_error("R02_SEATS: not enough seats left")
    assert (obs.error, obs.code, obs.detail) == ("rule_violation", "R02_SEATS", "not enough seats left")
    obs = _integrity_error("NOT NULL constraint failed: flights.origin")
    assert (obs.error, obs.code) == ("constraint_violation", "constraint")


def test_a_watched_copy_hashes_like_a_full_read(airline: World) -> None:
    ref = airline.state_ref(3, 30)
    env = airline.env(ref)
    assert env.state_hash() == ref.state_hash and env.written == frozenset()
    rid = env.conn.execute("SELECT reservation_id FROM reservations WHERE status = 'active' LIMIT 1").fetchone()[0]
    assert env.call(call("get_reservation_details", reservation_id=rid)).ok
    assert env.written == frozenset()  # a read writes nothing
    env.conn.execute("UPDATE reservations SET bags = bags + 1 WHERE reservation_id = ?", (rid,))
    assert "reservations" in (env.written or set())
    assert env.state_hash() == st.state_hash(env.conn) != ref.state_hash
    env.close()


def test_recent_keeps_the_most_recently_used() -> None:
    cache = Recent(size=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (1, None, 3, 2)
