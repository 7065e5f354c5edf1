"""What self-play templates are made of (`envs.templating`): a drawn row, and the facts of
an answer as a user must hear them."""

from __future__ import annotations

import random
import sqlite3

from envs.templating import each, pick, told


def test_pick_draws_a_row_with_the_rng() -> None:
    db = sqlite3.connect(":memory:")
    db.executescript("CREATE TABLE t (id TEXT, n INTEGER); INSERT INTO t VALUES ('a', 1), ('b', 2), ('c', 3);")
    drawn = {pick(db, random.Random(s), "SELECT * FROM t WHERE n > ?", 1)["id"] for s in range(30)}
    assert drawn == {"b", "c"}
    assert pick(db, random.Random(1), "SELECT * FROM t") == pick(db, random.Random(1), "SELECT * FROM t")
    assert pick(db, random.Random(0), "SELECT * FROM t WHERE n > 9") is None


def test_facts_say_values_as_a_user_hears_them() -> None:
    assert told("amount owed", 45.0, "amount").any_of == ["45"]  # a whole float says as an integer
    assert told("amount", 12.5, "amount").any_of == ["12.5"]
    fact = told("status", "in_transit", "text", "on its way")
    assert fact.label == "status" and fact.kind == "text"
    assert fact.any_of == ["in_transit", "in transit", "on its way"]
    assert told("x", "a_b", "text", "a b").any_of == ["a_b", "a b"]  # no duplicates
    items = each("item", ["lamp", "desk"])
    assert [f.any_of for f in items] == [["lamp"], ["desk"]] and all(f.label == "item" for f in items)


def test_pick_chain_and_by_table() -> None:
    import random
    import sqlite3

    from envs.templating import by_table, pick_chain, request

    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.executescript("CREATE TABLE a(id TEXT, k INT); CREATE TABLE b(id TEXT, k INT);"
                       "INSERT INTO a VALUES ('a1', 1), ('a2', 2); INSERT INTO b VALUES ('b2', 2);")
    got = pick_chain(conn, random.Random(0), "SELECT * FROM a WHERE k = 2",
                     then=[lambda a: ("SELECT * FROM b WHERE k = ?", (a["k"],))])
    assert got is not None and [r["id"] for r in got] == ["a2", "b2"]
    assert pick_chain(conn, random.Random(0), "SELECT * FROM a WHERE k = 1",
                      then=[lambda a: ("SELECT * FROM b WHERE k = ?", (a["k"],))]) is None
    out = request(conn, random.Random(0), "SELECT * FROM a WHERE k = 2", lambda a, b: ({"a": a["id"], "b": b["id"]},
                  [f"pair {a['id']} with {b['id']}"]), then=[lambda a: ("SELECT * FROM b WHERE k = ?", (a["k"],))])
    assert out == ({"a": "a2", "b": "b2"}, "pair a2 with b2")
    phrase = by_table(a=lambda c, row: f"the {row['id']} record")
    assert phrase(conn, "a", {"id": "a1"}) == "the a1 record" and phrase(conn, "b", {"id": "b2"}) is None
