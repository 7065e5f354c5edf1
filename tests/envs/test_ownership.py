"""Whose records a call touches (`envs.ownership`), on a small schema: the account table,
owners through foreign keys, records named by key, unique column or free text, and a copy
of the database scoped to one account."""

from __future__ import annotations

import json
import sqlite3

import pytest

from data.records import ToolCall
from envs import ownership as own

SCHEMA = """
CREATE TABLE customers (customer_id TEXT PRIMARY KEY, email TEXT UNIQUE, name TEXT);
CREATE TABLE products (product_id TEXT PRIMARY KEY, title TEXT);
CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer_id TEXT REFERENCES customers (customer_id));
CREATE TABLE items (order_id TEXT REFERENCES orders, product_id TEXT REFERENCES products (product_id),
                    qty INTEGER, PRIMARY KEY (order_id, product_id));
INSERT INTO customers VALUES ('c1', 'ann@example.com', 'Ann'), ('c2', 'bob@example.com', 'Bob');
INSERT INTO products VALUES ('p1', 'Lamp'), ('p2', 'Desk');
INSERT INTO orders VALUES ('#W1', 'c1'), ('#W2', 'c2'), ('O3', 'c1');
INSERT INTO items VALUES ('#W1', 'p1', 1), ('#W2', 'p1', 2), ('#W2', 'p2', 1);
"""


@pytest.fixture()
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    return conn


def test_layout_and_owners(db: sqlite3.Connection) -> None:
    assert own.account_table(db) == ("customers", "customer_id")
    assert own.ownable(db) == ["customers", "items", "orders"]  # products are shared
    assert own.owners(db, "items", {"order_id": "#W2", "product_id": "p1"}) == {"c2"}
    assert own.owners(db, "products", {"product_id": "p1"}) == set()


def test_records_named_by_a_call(db: sqlite3.Connection) -> None:
    by_key = own.named_records(db, ToolCall(name="x", arguments={"order_id": "#W1"}))
    assert by_key == [("orders", {"order_id": "#W1", "customer_id": "c1"})]
    assert own.call_owners(db, [ToolCall(name="find", arguments={"email": "bob@example.com"})]) == {"c2"}
    note = ToolCall(name="transfer", arguments={"summary": "Customer wants order O3 refunded."})
    assert own.call_owners(db, [note]) == {"c1"}  # a key inside free text
    shared = ToolCall(name="get_product", arguments={"product_id": "p2"})
    assert own.call_owners(db, [shared]) == set()
    assert own.result_accounts(db, json.dumps({"customer_id": "c2"})) == {"c2"}
    assert own.result_accounts(db, json.dumps({"customer_ids": ["c1"]})) == {"c1"}
    assert own.result_accounts(db, json.dumps({"customer_ids": ["c1", "c2"]})) == set()
    assert own.result_accounts(db, "not json") == set()


def test_scoped_copy_holds_one_account_and_the_shared_records(db: sqlite3.Connection) -> None:
    mine = own.scoped(db, "c1")
    assert mine.execute("SELECT customer_id FROM customers").fetchall() == [("c1",)]
    assert mine.execute("SELECT order_id FROM orders ORDER BY order_id").fetchall() == [("#W1",), ("O3",)]
    assert mine.execute("SELECT order_id, product_id FROM items").fetchall() == [("#W1", "p1")]
    assert mine.execute("SELECT COUNT(*) FROM products").fetchone() == (2,)
    assert db.execute("SELECT COUNT(*) FROM orders").fetchone() == (3,)  # the original is untouched


def test_a_schema_without_accounts() -> None:
    conn = sqlite3.connect(":memory:")
    conn.executescript("CREATE TABLE things (thing_id TEXT PRIMARY KEY); INSERT INTO things VALUES ('t1');")
    assert own.account_table(conn) is None and own.ownable(conn) == []
    assert own.call_owners(conn, [ToolCall(name="x", arguments={"thing_id": "t1"})]) == set()
    assert own.scoped(conn, "anyone").execute("SELECT COUNT(*) FROM things").fetchone() == (1,)
