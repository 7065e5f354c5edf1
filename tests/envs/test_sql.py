"""The world kit's SQL helpers (`envs.sql`): rows and records, literals, the world clock,
schema includes and content-minted ids."""

from __future__ import annotations

import sqlite3
from datetime import date, datetime
from pathlib import Path

import pytest

from envs import sql
from envs.tools import ToolError


@pytest.fixture()
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                       "INSERT INTO meta VALUES ('now', '2026-05-10 12:30:00');"
                       "CREATE TABLE items (id TEXT PRIMARY KEY, kind TEXT, n INTEGER);"
                       "INSERT INTO items VALUES ('a', 'x', 1), ('b', 'x', 2), ('c', NULL, 3);")
    return conn


def test_rows_row_one_need_count(db: sqlite3.Connection) -> None:
    assert sql.rows(db, "SELECT id FROM items WHERE kind = ? ORDER BY id", "x") == [{"id": "a"}, {"id": "b"}]
    assert sql.rows(db, "SELECT n FROM items WHERE id = :id", {"id": "c"}) == [{"n": 3}]
    assert sql.row(db, "SELECT * FROM items WHERE id = ?", "b") == {"id": "b", "kind": "x", "n": 2}
    assert sql.row(db, "SELECT * FROM items WHERE id = ?", "z") is None
    with pytest.raises(LookupError):
        sql.one(db, "SELECT * FROM items WHERE id = ?", "z")
    with pytest.raises(ToolError) as info:
        sql.need(None, "item", "z")
    assert info.value.code == "NOT_FOUND" and "item 'z' not found" in info.value.message
    assert sql.count(db, "items", kind="x") == 2 and sql.count(db, "items", kind=None) == 1
    assert sql.count(db, "items") == 3
    assert sql.fetch(db, "items", "id", "a", "item") == {"id": "a", "kind": "x", "n": 1}
    with pytest.raises(ToolError) as info:
        sql.fetch(db, "items", "id", "nope", "thing")
    assert info.value.code == "NOT_FOUND" and "thing 'nope' not found" in info.value.message


def test_literals_and_the_clock(db: sqlite3.Connection) -> None:
    assert sql.q(None) == "NULL" and sql.q("O'Hara") == "'O''Hara'" and sql.q(5) == "'5'"
    assert sql.now(db) == "2026-05-10 12:30:00" and sql.today(db) == date(2026, 5, 10)
    assert sql.now_dt(db) == datetime(2026, 5, 10, 12, 30) and sql.ts(sql.now_dt(db)) == sql.now(db)


def test_minted_ids_depend_on_content_not_order() -> None:
    a = sql.mint_id("R", {"user": "u1", "flight": "F1"})
    assert a == sql.mint_id("R", {"flight": "F1", "user": "u1"}) and len(a) == 7 and a.startswith("R")
    assert sql.mint_id("R", {"user": "u1", "flight": "F1"}, n=1) != a  # the same thing done twice
    assert sql.mint_id("R", {"user": "u2", "flight": "F1"}) != a
    order = sql.mint_id("#W", {"c": 1}, digits=True)
    assert order[2:].isdigit() and len(order) == 9


def test_schema_script_inlines_the_kit(tmp_path: Path) -> None:
    path = tmp_path / "schema.sql"
    path.write_text("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);\n-- include: ledger\n")
    text = sql.schema_script(path)
    assert "\n-- include: ledger\n" not in text and (Path(sql.__file__).parent / "ledger.sql").read_text().rstrip("\n") in text
    sqlite3.connect(":memory:").executescript(text)  # runs
    path.write_text("-- include: nothing_like_it\n")
    with pytest.raises(FileNotFoundError):
        sql.schema_script(path)


def test_schema_script_fills_an_includes_parameters(tmp_path: Path) -> None:
    (tmp_path / "rule.sql").write_text("CREATE TABLE {{table}} (x TEXT DEFAULT {{value:'none'}});\n")
    path = tmp_path / "schema.sql"
    path.write_text("-- include: rule table=a value=\"'it''s'\"\n-- include: rule table=b\n")
    text = sql.schema_script(path)  # the schema's own folder before the kit
    assert text == "CREATE TABLE a (x TEXT DEFAULT 'it''s');\nCREATE TABLE b (x TEXT DEFAULT 'none');\n"
    assert sql.include_args("""a=1 b='x y' c="NEW.p - OLD.p\"""") == {"a": "1", "b": "'x y'", "c": "NEW.p - OLD.p"}
    path.write_text("-- include: rule\n")
    with pytest.raises(ValueError, match="'table' has no value"):
        sql.schema_script(path)
    path.write_text("-- include: rule table=a colour=red\n")
    with pytest.raises(ValueError, match="no parameter colour"):
        sql.schema_script(path)


def test_the_kits_change_log_appends_old_and_new(tmp_path: Path) -> None:
    path = tmp_path / "schema.sql"
    path.write_text("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER NOT NULL);\n-- include: ledger\n"
                    "-- include: ledger_change name=log_n table=t column=n ref=id event='n_changed' amount=\"NEW.n - OLD.n\"\n")
    db = sqlite3.connect(":memory:")
    db.executescript(sql.schema_script(path))
    db.execute("INSERT INTO t VALUES ('a', 1)")
    db.execute("UPDATE t SET n = 3 WHERE id = 'a'")
    db.execute("UPDATE t SET n = 3 WHERE id = 'a'")  # no change, no row
    assert db.execute("SELECT ref, event, amount, detail, n FROM ledger").fetchall() == [("a", "n_changed", 2, "1 -> 3", 0)]


def test_set_new_changes_one_field_or_says_no_change(db: sqlite3.Connection) -> None:
    sql.set_new(db, "items", "id", "a", "n", 5, 1, "already 5")
    assert sql.row(db, "SELECT n FROM items WHERE id = 'a'") == {"n": 5}
    with pytest.raises(ToolError) as info:
        sql.set_new(db, "items", "id", "a", "n", 5, 5, "already 5")
    assert info.value.code == "NO_CHANGE" and info.value.message == "already 5"
    assert sql.row(db, "SELECT n FROM items WHERE id = 'b'") == {"n": 2}  # only the keyed row


def test_lookup_reads_a_tables_row_by_its_key(db: sqlite3.Connection) -> None:
    item = sql.lookup("items", "id")
    assert item(db, "b") == {"id": "b", "kind": "x", "n": 2} and item(db, "z") is None


def test_a_default_may_hold_placeholders(tmp_path: Path) -> None:
    (tmp_path / "rule.sql").write_text("SELECT {{detail:f('{{fmt:%s}}', {{col}})}};\n")
    path = tmp_path / "schema.sql"
    path.write_text("-- include: rule col=a\n-- include: rule col=a fmt=%d\n-- include: rule col=a detail=b\n")
    assert sql.schema_script(path) == "SELECT f('%s', a);\nSELECT f('%d', a);\nSELECT b;\n"
    path.write_text("-- include: rule col=a colour=red\n")
    with pytest.raises(ValueError, match="no parameter colour"):
        sql.schema_script(path)


def test_the_kits_record_log_status_guard_and_payment_methods(tmp_path: Path) -> None:
    path = tmp_path / "schema.sql"
    path.write_text(
        "CREATE TABLE owners (owner_id TEXT PRIMARY KEY, status TEXT NOT NULL);\n"
        "-- include: payment_methods owner=owner_id owners=owners kinds=\"'card', 'gift'\" rule=R04_BALANCE"
        " checks=\"CHECK ((kind = 'card') = (balance IS NULL))\"\n"
        "CREATE TABLE buys (buy_id TEXT PRIMARY KEY, owner_id TEXT NOT NULL, amount INTEGER NOT NULL);\n"
        "-- include: parent_status name=r01 event=INSERT table=buys parent=owners key=owner_id is=\"= 'closed'\""
        " message='R01_CLOSED: a closed account buys nothing'\n"
        "-- include: ledger\n"
        "-- include: ledger_insert name=log_buy table=buys ref=buy_id event='bought' amount=NEW.amount"
        " detail=\"printf('by %s', NEW.owner_id)\"\n"
        "-- include: ledger_insert name=log_owner table=owners ref=owner_id event='opened'\n")
    db = sqlite3.connect(":memory:")
    db.executescript(sql.schema_script(path))
    db.executescript("INSERT INTO owners VALUES ('o1', 'open'), ('o2', 'closed');"
                     "INSERT INTO buys VALUES ('b1', 'o1', 7);")
    with pytest.raises(sqlite3.IntegrityError, match="R01_CLOSED"):
        db.execute("INSERT INTO buys VALUES ('b2', 'o2', 1)")
    assert db.execute("SELECT ref, event, amount, detail FROM ledger ORDER BY ref").fetchall() == [
        ("b1", "bought", 7, "by o1"), ("o1", "opened", 0, ""), ("o2", "opened", 0, "")]
    db.execute("INSERT INTO payment_methods VALUES ('p1', 'o1', 'gift', NULL, 5)")
    for bad in ["('p2', 'o1', 'gift', NULL, -1)", "('p3', 'o1', 'card', '4242', 5)", "('p4', 'o1', 'cash', NULL, NULL)"]:
        with pytest.raises(sqlite3.IntegrityError):
            db.execute(f"INSERT INTO payment_methods VALUES {bad}")
