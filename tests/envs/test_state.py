"""States as data (`envs.state`): hashes, snapshots and cell-level diffs."""

from __future__ import annotations

import sqlite3

from envs import state as st
from envs.world import Env
from envs.worlds.airline.probes import call


def tiny() -> sqlite3.Connection:
    conn = st.connect_memory()
    conn.executescript("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER, w TEXT);"
                       "CREATE TABLE loose (a INTEGER, b TEXT);"
                       "INSERT INTO t VALUES ('x', 1, 'one'), ('y', 2, 'two'); INSERT INTO loose VALUES (1, 'p');")
    return conn


def test_canonical_dump_keys_rows_by_primary_key() -> None:
    conn = tiny()
    dump = st.canonical_dump(conn)
    assert st.tables(conn) == ["loose", "t"] and st.primary_key(conn, "t") == ["k"]
    assert st.primary_key(conn, "loose") == ["a", "b"]  # no primary key: the whole row
    assert dump["t"] == {'["x"]': {"k": "x", "v": 1, "w": "one"}, '["y"]': {"k": "y", "v": 2, "w": "two"}}
    assert list(st.canonical_dump(conn, only=["t", "nope"])) == ["t"]
    other = st.connect_memory()  # the same rows inserted in another order hash the same
    other.executescript("CREATE TABLE loose (a INTEGER, b TEXT); CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER, w TEXT);"
                        "INSERT INTO t VALUES ('y', 2, 'two'), ('x', 1, 'one'); INSERT INTO loose VALUES (1, 'p');")
    assert st.state_hash(other) == st.state_hash(conn)


def test_diffs_list_each_changed_cell() -> None:
    before = tiny()
    after = st.restore(st.snapshot(before))
    after.executescript("UPDATE t SET v = 5 WHERE k = 'x'; DELETE FROM t WHERE k = 'y'; INSERT INTO t VALUES ('z', 0, NULL)")
    changes = st.diff_states(before, after)
    assert changes == st.diff_dumps(st.canonical_dump(before), st.canonical_dump(after))
    got = {(c.key, c.column, c.op): (c.before, c.after) for c in changes}
    assert got[('["x"]', "v", "update")] == (1, 5) and ('["x"]', "w", "update") not in got
    assert got[('["y"]', "w", "delete")] == ("two", None) and got[('["z"]', "k", "insert")] == (None, "z")
    assert len(changes) == 1 + 3 + 3
    assert st.diff_states(before, after, only=["loose"]) == []


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
    # the reservation's cells are updated in place; the ledger gains one row for the change
    assert all(c.op == "update" for c in changes if c.table != "ledger")
    logged = [c for c in changes if c.table == "ledger"]
    assert {c.op for c in logged} == {"insert"} and {c.key for c in logged} == {'["RA","bags_changed",100,"0 -> 2",0]'}
    # read-only calls never change the hash
    env.call(call("search_flights", origin="SFO", destination="JFK", date="2026-05-13"))
    assert st.state_hash(st.restore(env.snapshot())) == env.state_hash()
