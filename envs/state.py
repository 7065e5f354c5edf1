"""World state: canonical dumps, hashes, cell-level diffs and cheap snapshots.

A state is a SQLite database. Its canonical form is every user table, rows sorted by
primary key, as JSON; the state hash is the sha256 of that. Snapshots are the bytes of
`Connection.serialize()`, and a fresh copy is a `deserialize` into a new in-memory
database (tens of microseconds for a few hundred rows).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

Dump = dict[str, dict[str, dict[str, Any]]]  # table -> row key -> column -> value


def connect_memory() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA recursive_triggers = OFF")
    return conn


def snapshot(conn: sqlite3.Connection) -> bytes:
    return conn.serialize()


def restore(data: bytes) -> sqlite3.Connection:
    """A fresh, independent, writable connection holding the snapshot's state."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.deserialize(data)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall()
    return [r[0] for r in rows]


def primary_key(conn: sqlite3.Connection, table: str) -> list[str]:
    info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    pk = [r[1] for r in sorted(info, key=lambda r: r[5]) if r[5] > 0]
    return pk or [r[1] for r in info]  # no primary key: the whole row is the key


def canonical_dump(conn: sqlite3.Connection) -> Dump:
    """Every table as {row key: {column: value}}, keys in primary-key order."""
    out: Dump = {}
    for table in tables(conn):
        pk = primary_key(conn, table)
        cur = conn.execute(f'SELECT * FROM "{table}"')
        cols = [d[0] for d in cur.description]
        rows: dict[str, dict[str, Any]] = {}
        for row in cur.fetchall():
            record = dict(zip(cols, row, strict=True))
            key = json.dumps([record[c] for c in pk], separators=(",", ":"))
            rows[key] = record
        out[table] = dict(sorted(rows.items()))
    return out


def hash_dump(dump: Dump) -> str:
    body = json.dumps(dump, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def state_hash(conn: sqlite3.Connection) -> str:
    return hash_dump(canonical_dump(conn))


@dataclass(frozen=True)
class CellChange:
    """One cell that differs between two states. Added/removed rows list every cell."""

    table: str
    key: str
    column: str
    before: Any
    after: Any
    op: str  # "update", "insert", "delete"

    def cell(self) -> tuple[str, str, str]:
        return (self.table, self.key, self.column)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table, "key": self.key, "column": self.column,
            "before": self.before, "after": self.after, "op": self.op,
        }


def diff_dumps(before: Dump, after: Dump) -> list[CellChange]:
    """Cell-level difference from `before` to `after`, in a stable order."""
    changes: list[CellChange] = []
    for table in sorted(set(before) | set(after)):
        a, b = before.get(table, {}), after.get(table, {})
        for key in sorted(set(a) | set(b)):
            ra, rb = a.get(key), b.get(key)
            if ra == rb:
                continue
            op = "insert" if ra is None else "delete" if rb is None else "update"
            for col in sorted(set(ra or {}) | set(rb or {})):
                va = (ra or {}).get(col)
                vb = (rb or {}).get(col)
                if op != "update" or va != vb:
                    changes.append(CellChange(table, key, col, va, vb, op))
    return changes


def diff_states(before: sqlite3.Connection, after: sqlite3.Connection) -> list[CellChange]:
    return diff_dumps(canonical_dump(before), canonical_dump(after))
