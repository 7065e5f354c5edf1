"""Whose records a call touches, read off a world's database: the account (a user, a
customer, a patient) that each record named by a call belongs to.

- the **account table** is the table whose one-column primary key is named like an account
  id (`envs.conversation.ACCOUNT_KEYS`: ``users.user_id``, ``customers.customer_id``,
  ``patients.patient_id``);
- a record belongs to the accounts its foreign keys lead to (a reservation to its user, an
  order item through its order to the customer, a bill payment through its bill); a record
  no foreign-key path joins to an account (a flight, a product, a plan, a slot) is shared
  and belongs to no one;
- a call names a record by an argument that is its primary key, a value of one of its
  single-column UNIQUE columns (an e-mail, a phone number), or a key written inside a
  free-text argument (a note to a human agent); a call's result that states an account id
  at its top level (a lookup by name and zip code) names that account too.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from data.records import ToolCall
from envs.conversation import ACCOUNT_KEYS
from envs.state import primary_key, tables

_SKIP = ("meta", "ledger")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.#/-]*[A-Za-z0-9]")

Record = tuple[str, dict[str, Any]]


def _schema_key(conn: sqlite3.Connection) -> str:
    return "\n".join(r[0] or "" for r in conn.execute("SELECT sql FROM sqlite_master ORDER BY name"))


class Layout:
    """What ownership needs of a schema: the account table and every table's keys."""

    def __init__(self, account: tuple[str, str] | None, pks: dict[str, list[str]], unique: dict[str, list[str]],
                 fks: dict[str, list[tuple[str, list[str], list[str]]]]) -> None:
        self.account = account
        self.pks = pks
        self.unique = unique
        self.fks = fks

    @classmethod
    def read(cls, conn: sqlite3.Connection) -> Layout:
        names = [t for t in tables(conn) if t not in _SKIP and not t.startswith("_")]
        pks = {t: primary_key(conn, t) for t in names}
        account = next(((t, pk[0]) for t, pk in pks.items() if len(pk) == 1 and pk[0] in ACCOUNT_KEYS), None)
        unique: dict[str, list[str]] = {}
        for t in names:
            cols = []
            for idx in conn.execute(f'PRAGMA index_list("{t}")').fetchall():
                if idx[2] and idx[3] == "u":  # a UNIQUE constraint (not the primary key)
                    info = conn.execute(f'PRAGMA index_info("{idx[1]}")').fetchall()
                    if len(info) == 1:
                        cols.append(info[0][2])
            unique[t] = cols
        fks: dict[str, list[tuple[str, list[str], list[str]]]] = {}
        for t in names:
            groups: dict[int, tuple[str, list[str], list[str]]] = {}
            for r in conn.execute(f'PRAGMA foreign_key_list("{t}")').fetchall():
                ref, frm, to = r[2], r[3], r[4]
                g = groups.setdefault(r[0], (ref, [], []))
                g[1].append(frm)
                g[2].append(to)
            out = []
            for ref, frm, to in groups.values():
                if ref not in pks:
                    continue
                if any(c is None for c in to):  # REFERENCES t without columns: t's primary key
                    to = list(pks[ref])
                out.append((ref, frm, to))
            fks[t] = out
        return cls(account, pks, unique, fks)


_LAYOUTS: dict[str, Layout] = {}  # schema text -> its layout


def layout(conn: sqlite3.Connection) -> Layout:
    """The ownership layout of `conn`'s schema (cached per schema text)."""
    key = _schema_key(conn)
    found = _LAYOUTS.get(key)
    if found is None:
        found = _LAYOUTS[key] = Layout.read(conn)
    return found


def _rows(conn: sqlite3.Connection, table: str, cols: Sequence[str], values: Sequence[Any]) -> list[dict[str, Any]]:
    where = " AND ".join(f'"{c}" = ?' for c in cols)
    cur = conn.execute(f'SELECT * FROM "{table}" WHERE {where}', tuple(values))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def owners(conn: sqlite3.Connection, table: str, row: dict[str, Any], depth: int = 5) -> set[str]:
    """The accounts the record `row` of `table` belongs to (empty for a shared record)."""
    lay = layout(conn)
    if lay.account is None:
        return set()
    acct_table, acct_key = lay.account
    if table == acct_table:
        return {str(row[acct_key])}
    if depth <= 0:
        return set()
    out: set[str] = set()
    for ref, frm, to in lay.fks.get(table, []):
        values = [row.get(c) for c in frm]
        if any(v is None for v in values):
            continue
        for parent in _rows(conn, ref, to, values):
            out |= owners(conn, ref, parent, depth - 1)
    return out


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [v for x in value for v in _leaves(x)]
    if isinstance(value, dict):
        return [v for x in value.values() for v in _leaves(x)]
    return [value]


def named_records(conn: sqlite3.Connection, call: ToolCall) -> list[Record]:
    """The records a call names by its arguments: by primary key, by a single-column UNIQUE
    column, or by a primary key written inside a free-text argument."""
    lay = layout(conn)
    out: list[Record] = []
    seen: set[tuple[str, str]] = set()

    def add(table: str, found: list[dict[str, Any]]) -> None:
        for r in found:
            key = (table, json.dumps([r.get(c) for c in lay.pks[table]], default=str))
            if key not in seen:
                seen.add(key)
                out.append((table, r))

    values = [v for v in _leaves(call.arguments) if isinstance(v, str) and v]
    for value in values:
        candidates = [value] + [t.strip(".#/-") for t in _TOKEN.findall(value) if t != value]
        for text in candidates:
            for table, pk in lay.pks.items():
                if len(pk) == 1:
                    add(table, _rows(conn, table, pk, [text]))
        for table, cols in lay.unique.items():
            for col in cols:
                add(table, _rows(conn, table, [col], [value]))
    return out


def result_accounts(conn: sqlite3.Connection, content: str | None) -> set[str]:
    """The account a call's result names at its top level (a lookup's customer id, or the
    only one of a list of them), if any."""
    lay = layout(conn)
    if lay.account is None or not content:
        return set()
    try:
        body = json.loads(content)
    except (TypeError, ValueError):
        return set()
    key = lay.account[1]
    if not isinstance(body, dict):
        return set()
    many = body.get(key + "s")
    value = body.get(key) if key in body else many[0] if isinstance(many, list) and len(many) == 1 else None
    if isinstance(value, str) and _rows(conn, lay.account[0], [key], [value]):
        return {value}
    return set()


def call_owners(conn: sqlite3.Connection, calls: Iterable[ToolCall], results: Sequence[str | None] = ()) -> set[str]:
    """Every account whose records `calls` name (and their `results`, when given), on `conn`
    (the state the calls start from)."""
    out: set[str] = set()
    for call in calls:
        for table, row in named_records(conn, call):
            out |= owners(conn, table, row)
    for content in results:
        out |= result_accounts(conn, content)
    return out


def account_table(conn: sqlite3.Connection) -> tuple[str, str] | None:
    """(table, key column) of the world's accounts, or None for a world without one."""
    return layout(conn).account


def ownable(conn: sqlite3.Connection) -> list[str]:
    """The tables whose records belong to accounts: the account table and every table a
    foreign-key path joins to it."""
    lay = layout(conn)
    if lay.account is None:
        return []
    found = {lay.account[0]}
    grew = True
    while grew:
        grew = False
        for table, fks in lay.fks.items():
            if table not in found and any(ref in found for ref, _, _ in fks):
                found.add(table)
                grew = True
    return sorted(found)


def scoped(conn: sqlite3.Connection, account: str) -> sqlite3.Connection:
    """An in-memory copy of `conn` that holds only `account`'s records and the shared ones:
    every other account is deleted, then every record whose foreign key points at a deleted
    record, until none is left (delete triggers are dropped first; the others stay, so a
    write tried on the copy meets the world's rules)."""
    lay = layout(conn)
    out = sqlite3.connect(":memory:")
    conn.backup(out)
    if lay.account is None:
        return out
    for (name,) in out.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND upper(sql) LIKE '%DELETE ON%'"
                               ).fetchall():
        out.execute(f'DROP TRIGGER "{name}"')
    table, key = lay.account
    out.execute(f'DELETE FROM "{table}" WHERE "{key}" IS NOT ?', (account,))
    owned = set(ownable(conn))
    changed = True
    while changed:
        changed = False
        for child, fks in lay.fks.items():
            for ref, frm, to in fks:
                if ref not in owned:
                    continue
                match = " AND ".join(f'p."{t}" = c."{f}"' for f, t in zip(frm, to, strict=True))
                present = " AND ".join(f'c."{f}" IS NOT NULL' for f in frm)
                cur = out.execute(
                    f'DELETE FROM "{child}" WHERE rowid IN (SELECT c.rowid FROM "{child}" AS c WHERE {present}'
                    f' AND NOT EXISTS (SELECT 1 FROM "{ref}" AS p WHERE {match}))')
                changed |= cur.rowcount > 0
    out.commit()
    return out
