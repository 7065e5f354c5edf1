"""The incremental state (envs.state.TrackedState) and the cached replay of the state
verifier give exactly what full dumps give."""

from __future__ import annotations

import random

import pytest

from data.records import Task, ToolCall
from envs import state as st
from verifiers.audit import mutants
from verifiers.state import score_calls, score_calls_full


def test_tracked_state_matches_full_dumps_after_sql_writes() -> None:
    conn = st.connect_memory()
    conn.executescript("""
        CREATE TABLE a (id TEXT PRIMARY KEY, v INTEGER, f REAL, b BLOB);
        CREATE TABLE k (x INTEGER, y TEXT, PRIMARY KEY (x, y)) WITHOUT ROWID;
        CREATE TABLE n (v TEXT);
        INSERT INTO a VALUES ('r1', 1, 0.5, NULL), ('r2', 2, 1.25, x'00ff'), ('r3', 3, NULL, NULL);
        INSERT INTO k VALUES (1, 'p'), (2, 'q');
        INSERT INTO n VALUES ('same'), ('same');
    """)
    base = st.canonical_dump(conn)
    tracked = st.TrackedState(conn)
    assert tracked.base_hash == st.hash_dump(base)
    script = [
        "UPDATE a SET v = 10 WHERE id = 'r1'",
        "DELETE FROM a WHERE id = 'r2'",
        "INSERT INTO a VALUES ('r0', 7, 2.5, 'é')",
        "UPDATE a SET id = 'r9' WHERE id = 'r3'",  # the primary key itself changes
        "INSERT INTO k VALUES (3, 'z')",
        "DELETE FROM n WHERE rowid = 1",
        "UPDATE a SET v = 10 WHERE id = 'r1'",  # a no-op update
    ]
    for n in range(len(script) + 1):
        tracked.begin()
        for sql in script[:n]:
            conn.execute(sql)
        view = tracked.current()
        full = st.canonical_dump(conn)
        assert view.dump == full
        assert view.hash == st.hash_dump(full)
        assert view.changes() == st.diff_dumps(base, full)
        assert view.changed_cells() == {c.cell() for c in st.diff_dumps(base, full)}
        rows_only = tracked.current(hashed=False)
        assert rows_only.hash == "" and rows_only.dump == full and rows_only.changes() == view.changes()
        tracked.rollback()
        assert st.state_hash(conn) == tracked.base_hash


def test_commit_inside_replay_invalidates_the_tracker() -> None:
    conn = st.connect_memory()
    conn.executescript(
        "CREATE TABLE a (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO a VALUES (1, 1);"
    )
    tracked = st.TrackedState(conn)
    tracked.begin()
    conn.execute("COMMIT")
    with pytest.raises(RuntimeError, match="no longer valid"):
        tracked.current()
    assert not tracked.valid


def test_cached_replay_scores_like_full_replay(tasks: list[Task]) -> None:
    rng = random.Random(5)
    checked = 0
    for task in tasks:
        variants = [task.reference_solution, []] + [m.calls for m in mutants(task)]
        pool = [c for calls in variants for c in calls]
        for _ in range(4):  # random sequences of the task's calls and its mutants' calls
            variants.append(rng.sample(pool, k=min(len(pool), rng.randint(1, 4))))
        variants.append(
            [
                ToolCall(name="cancel_reservation", arguments={"reservation_id": "nope"}),
                ToolCall(name="no_such_tool", arguments={}),
            ]
        )
        for calls in variants:
            assert score_calls(task, calls) == score_calls_full(task, calls)
            checked += 1
    assert checked >= 10 * len(tasks)


def test_cached_constraint_replay_scores_like_full_replay() -> None:
    """Constraint satisfaction on the cached state (rows re-read after each write) gives what
    rebuilding and dumping the state gives, and the ledger amounts the replay keeps for the
    policy check are those a replay of its own finds."""
    from envs.registry import get_world
    from synthesis.base import SynthesisConfig, get_method
    from verifiers.constraints import score_constraints, score_constraints_full
    from verifiers.policy import _write_amounts
    from verifiers.state import replayer_for

    rng = random.Random(3)
    for world in ("airline", "clinic", "retail"):
        (task,) = get_method("constraint_guided")(
            SynthesisConfig(method="constraint_guided", world=world, n_tasks=1, seed=4), get_world(world)).tasks
        tools = get_world(world).tools
        variants = [task.reference_solution, []] + [m.calls for m in mutants(task)]
        pool = [c for calls in variants for c in calls]
        variants += [rng.sample(pool, k=min(len(pool), rng.randint(1, 4))) for _ in range(3)]
        r = replayer_for(task.world, task.initial_state)
        assert r is not None and r.has_ledger  # these worlds keep a ledger
        r.remembered_amounts([])  # a policy check asks: from now on replays record the amounts
        for calls in variants:
            assert score_constraints(task, calls) == score_constraints_full(task, calls)
            writes = [c for c in calls if c.name in tools and tools[c.name].write]
            assert r.remembered_amounts(writes) is not None
            kept = _write_amounts(task, writes)  # from the replay just made
            r._last_amounts = None
            assert kept == _write_amounts(task, writes)  # a replay of its own


@pytest.mark.slow
@pytest.mark.parametrize("world", ["airline", "retail", "telecom", "clinic"])
def test_watched_env_hash_matches_full_hash(world: str) -> None:
    """A copy of a state reference hashes from the reference's cached table JSONs and a
    re-read of the tables its statements wrote (`st.WriteWatch`): after every call of gold
    paths, mutants and random mixes (failures and rolled-back calls included) the hash is
    the full `state_hash`."""
    from envs.registry import get_world
    from synthesis.base import SynthesisConfig, get_method

    w = get_world(world)
    rng = random.Random(11)
    checked = 0
    for method in ("constraint_guided", "logic_driven"):
        found = get_method(method)(SynthesisConfig(method=method, world=world, n_tasks=3, seed=7), w).tasks
        for task in found:
            variants = [task.reference_solution] + [m.calls for m in mutants(task)]
            pool = [c for calls in variants for c in calls]
            variants += [rng.sample(pool, k=min(len(pool), rng.randint(2, 6))) for _ in range(3)]
            for calls in variants:
                env = w.env(task.initial_state)
                try:
                    assert env.state_hash() == task.initial_state.state_hash == st.state_hash(env.conn)
                    initial = w.build_state(task.initial_state.seed, task.initial_state.scale, task.initial_state.patches)
                    diff_from = st.DiffFrom(initial)
                    for call in calls:
                        env.call(call)
                        assert env.state_hash() == st.state_hash(env.conn)
                        full = st.diff_dumps(st.canonical_dump(initial), st.canonical_dump(env.conn))
                        assert diff_from(env.conn) == full == diff_from(env.conn, env.written)
                        checked += 1
                    initial.close()
                finally:
                    env.close()
    assert checked >= 20


def test_write_watch_notes_trigger_writes_and_gives_up_on_schema_changes() -> None:
    conn = st.connect_memory()
    conn.executescript("""
        CREATE TABLE a (id INTEGER PRIMARY KEY, v INTEGER);
        CREATE TABLE log (id INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT);
        CREATE TRIGGER a_log AFTER UPDATE ON a BEGIN INSERT INTO log (what) VALUES ('a'); END;
        INSERT INTO a VALUES (1, 1), (2, 2);
    """)
    hashes = st.StateHashes.of(conn)
    assert hashes.hash == st.state_hash(conn)
    watch = st.WriteWatch()
    conn.set_authorizer(watch)
    conn.execute("SELECT * FROM a").fetchall()
    conn.execute("CREATE TEMP TABLE scratch (x)")  # temp tables are not state
    conn.execute("INSERT INTO scratch VALUES (1)")
    assert watch.tables == set() and not watch.lost
    assert hashes.rehash(conn, watch.tables) == hashes.hash
    conn.execute("UPDATE a SET v = 5 WHERE id = 2")
    assert watch.tables == {"a", "log"}  # the trigger's insert is noted too
    assert hashes.rehash(conn, watch.tables) == st.state_hash(conn) != hashes.hash
    conn.execute("CREATE TABLE b (x)")
    assert watch.lost


def test_rehash_encodes_rows_that_are_equal_but_written_differently() -> None:
    """1 and 1.0, 0.0 and -0.0 are equal in Python (and hash alike) but JSON writes them
    differently: a re-read row holding them is encoded again, not taken from the base."""
    conn = st.connect_memory()
    conn.executescript("CREATE TABLE t (id TEXT PRIMARY KEY, v); INSERT INTO t VALUES ('a', 1), ('b', 0.0);")
    hashes = st.StateHashes.of(conn)
    conn.execute("UPDATE t SET v = 1.0 WHERE id = 'a'")
    conn.execute("UPDATE t SET v = -0.0 WHERE id = 'b'")
    assert conn.execute("SELECT v FROM t ORDER BY id").fetchall() == [(1.0,), (-0.0,)]
    assert hashes.rehash(conn, {"t"}) == st.state_hash(conn) != hashes.hash


def test_diff_states_equals_diff_of_dumps() -> None:
    """`diff_states` compares rows as SQLite returns them and keys only those that differ:
    the same changes as diffing the canonical dumps, through key changes, deletes, inserts,
    a value that changes type (1 -> 1.0), tables without a key, and a table added."""
    conn = st.connect_memory()
    conn.executescript("""
        CREATE TABLE a (id TEXT PRIMARY KEY, v, f REAL);
        CREATE TABLE n (v TEXT);
        INSERT INTO a VALUES ('r1', 1, 0.5), ('r2', 2, 1.5), ('r3', 'x', NULL);
        INSERT INTO n VALUES ('same'), ('same'), ('other');
    """)
    before = st.restore(st.snapshot(conn))
    script = ["UPDATE a SET v = 1.0 WHERE id = 'r1'", "DELETE FROM a WHERE id = 'r2'", "INSERT INTO a VALUES ('r0', 7, 2.5)",
              "UPDATE a SET id = 'r9' WHERE id = 'r3'", "DELETE FROM n WHERE rowid = 1", "DELETE FROM n WHERE v = 'other'",
              "CREATE TABLE z (k INTEGER PRIMARY KEY, w TEXT)", "INSERT INTO z VALUES (1, 'new')"]
    diff_from = st.DiffFrom(before)
    for sql in script:
        conn.execute(sql)
        full = st.diff_dumps(st.canonical_dump(before), st.canonical_dump(conn))
        assert st.diff_states(before, conn) == full == diff_from(conn)
    assert not any(c.key == '["r1"]' for c in full)  # 1 and 1.0 are equal values, as in the dumps
    assert diff_from(conn, ["a"]) == [c for c in full if c.table == "a"]
