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
from collections.abc import Iterable
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


def canonical_dump(conn: sqlite3.Connection, only: Iterable[str] | None = None) -> Dump:
    """Every table (or those of `only` that are tables) as {row key: {column: value}}, keys
    in primary-key order."""
    out: Dump = {}
    names = tables(conn)
    if only is not None:
        wanted = set(only)
        names = [t for t in names if t in wanted]
    for table in names:
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


def diff_states(before: sqlite3.Connection, after: sqlite3.Connection,
                only: Iterable[str] | None = None) -> list[CellChange]:
    """`diff_dumps(canonical_dump(before), canonical_dump(after))`, over the tables of `only`
    when given (the caller knows the others are equal); see `DiffFrom`."""
    return DiffFrom(before)(after, only)


class DiffFrom:
    """Cell-level diffs of states against one `before` state (read once per table).

    Rows are compared as SQLite returns them, with their values' types; only those that
    differ are keyed and turned into records, so a diff equals `diff_dumps` of the two
    canonical dumps without building them. A table whose columns or key differ between the
    two states is diffed from its dumps."""

    def __init__(self, before: sqlite3.Connection) -> None:
        self.before = before
        self._tables = tables(before)
        self._rows: dict[str, Any] = {}

    def __call__(self, after: sqlite3.Connection, only: Iterable[str] | None = None) -> list[CellChange]:
        after_tables = tables(after)
        names = sorted(set(self._tables) | set(after_tables))
        if only is not None:
            wanted = set(only)
            names = [t for t in names if t in wanted]
        changes: list[CellChange] = []
        for table in names:
            if table not in self._rows:
                self._rows[table] = _typed_rows(self.before, table) if table in self._tables else None
            old = self._rows[table]
            new = _typed_rows(after, table) if table in after_tables else None
            if old is None or new is None or old[:2] != new[:2]:
                changes += diff_dumps(canonical_dump(self.before, [table]), canonical_dump(after, [table]))
                continue
            cols, pk, rows_b, rows_a = old[0], old[1], old[2], new[2]
            changes += diff_dumps({table: _keyed(rows_b - rows_a, cols, pk)}, {table: _keyed(rows_a - rows_b, cols, pk)})
        return changes


def _typed_rows(conn: sqlite3.Connection, table: str
                ) -> tuple[list[str], list[str], set[tuple[tuple[Any, ...], tuple[type, ...]]]]:
    """(columns, key columns, each row with its values' types) of `table`."""
    cur = conn.execute(f'SELECT * FROM "{table}"')
    cols = [d[0] for d in cur.description]
    return cols, primary_key(conn, table), {(raw, tuple(map(type, raw))) for raw in cur.fetchall()}


def _keyed(rows: set[tuple[tuple[Any, ...], tuple[type, ...]]], cols: list[str], pk: list[str]
           ) -> dict[str, dict[str, Any]]:
    """Rows as `canonical_dump` holds them: {row key: {column: value}}."""
    idx = [cols.index(c) for c in pk]
    return {_key_json([raw[i] for i in idx]): dict(zip(cols, raw, strict=True)) for raw, _ in rows}


# -- incremental state: the dump and hash of a state kept up to date from the rows that changed --

_LOG = "_trajforge_changed_rows"


_row_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode
_slow_key_json = json.JSONEncoder(separators=(",", ":")).encode
_str_json = json.encoder.encode_basestring_ascii  # json.dumps of a str (ensure_ascii)


def _scalar(v: Any) -> str | None:
    """JSON of a SQLite scalar exactly as `json.dumps` writes it; None when unsure."""
    t = type(v)
    if t is str:
        return _str_json(v)
    if t is int:
        return int.__repr__(v)
    if v is None:
        return "null"
    if t is float and v == v and v not in (float("inf"), float("-inf")):
        return float.__repr__(v)
    return None


def _key_json(values: list[Any]) -> str:
    """`json.dumps(values, separators=(",", ":"))` for a row's primary-key values."""
    parts = [_scalar(v) for v in values]
    if None in parts:
        return _slow_key_json(values)
    return "[" + ",".join(parts) + "]"  # type: ignore[arg-type]


def _entry(key: str, row_json: str) -> str:
    return _str_json(key) + ":" + row_json


@dataclass
class TrackedView:
    """The state at one moment of a tracked replay: its dump, hash, and the rows that differ
    from the base (`before`/`after`: table -> key -> row, only rows that changed)."""

    dump: Dump
    hash: str
    before: Dump
    after: Dump

    def changes(self) -> list[CellChange]:
        """Cell changes from the base, as `diff_dumps(base, dump)` gives them."""
        return diff_dumps(self.before, self.after)

    def changed_cells(self) -> set[tuple[str, str, str]]:
        """The (table, key, column) cells of `changes()`, computed without building them."""
        cells: set[tuple[str, str, str]] = set()
        for table in set(self.before) | set(self.after):
            a, b = self.before.get(table, {}), self.after.get(table, {})
            for key in set(a) | set(b):
                ra, rb = a.get(key), b.get(key)
                if ra is None or rb is None:
                    cells.update((table, key, c) for c in (ra or rb or {}))
                else:
                    diff = {c for c in set(ra) | set(rb) if ra.get(c) != rb.get(c)}
                    cells.update((table, key, c) for c in diff)
        return cells


def _table_json(entries: dict[str, str]) -> str:
    return "{" + ",".join(entries[k] for k in sorted(entries)) + "}"


class TrackedState:
    """A live state that knows its canonical dump and hash without re-reading every table.

    The connection's initial state (the *base*) is dumped once. Temporary triggers log the
    rowid of every inserted, updated or deleted row into a temp table; `begin()` opens a
    transaction, and after any number of writes `current()` re-reads only the logged rows
    and returns the same dump, hash and cell diff that `canonical_dump`, `hash_dump` and
    `diff_dumps` give for the whole database. `rollback()` returns to the base, so one
    connection serves many replays (its prepared statements stay cached too).

    Tables without a rowid or without a primary key are re-read whole on every `current()`.
    Writes must happen inside `begin()`/`rollback()`; a tool that ends the transaction itself
    invalidates the tracker (`valid` turns False) and the owner must rebuild it.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            raise ValueError("TrackedState needs a connection outside a transaction")
        self.conn = conn
        self.tables = tables(conn)
        self.pk = {t: primary_key(conn, t) for t in self.tables}
        self.rows: Dump = {}
        self.rowid_key: dict[str, dict[int, str]] = {}
        self.entries: dict[str, dict[str, str]] = {}
        self.table_json: dict[str, str] = {}
        self.no_rowid: set[str] = set()
        for t in self.tables:
            if not any(r[5] for r in conn.execute(f'PRAGMA table_info("{t}")')):
                self.no_rowid.add(t)  # no primary key: equal rows share a key, re-read it whole
            rows, rowid_key, entries = self._read_table(t)
            self.rows[t] = dict(sorted(rows.items()))
            self.rowid_key[t] = rowid_key
            self.entries[t] = entries
            self.table_json[t] = _table_json(entries)
        order = {t: sorted(e) for t, e in self.entries.items()}
        self.parts: dict[str, list[str]] = {
            t: [self.entries[t][k] for k in ks] for t, ks in order.items()}
        self.pos: dict[str, dict[str, int]] = {
            t: {k: i for i, k in enumerate(ks)} for t, ks in order.items()}
        self.base_hash = self._hash(self.table_json)
        conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_LOG} "
                     "(tbl TEXT NOT NULL, rid INTEGER NOT NULL)")
        for i, t in enumerate(self.tables):
            if t in self.no_rowid:
                continue
            q = t.replace("'", "''")
            for event, ref in (("INSERT", "NEW"), ("DELETE", "OLD"), ("UPDATE", "OLD")):
                new_row = f"INSERT INTO {_LOG} VALUES ('{q}', NEW.rowid);"
                extra = new_row if event == "UPDATE" else ""
                conn.execute(
                    f"CREATE TEMP TRIGGER IF NOT EXISTS _trajforge_log_{i}_{event.lower()} "
                    f'AFTER {event} ON main."{t}" '
                    f"BEGIN INSERT INTO {_LOG} VALUES ('{q}', {ref}.rowid); {extra} END"
                )
        self.valid = True
        self._open = False

    def _read_table(
        self, table: str
    ) -> tuple[dict[str, dict[str, Any]], dict[int, str], dict[str, str]]:
        pk = self.pk[table]
        try:
            cur = self.conn.execute(f'SELECT rowid, * FROM "{table}"')
            has_rowid = True
        except sqlite3.OperationalError:  # WITHOUT ROWID
            cur = self.conn.execute(f'SELECT * FROM "{table}"')
            has_rowid = False
            self.no_rowid.add(table)
        cols = [d[0] for d in cur.description][1 if has_rowid else 0:]
        rows: dict[str, dict[str, Any]] = {}
        rowid_key: dict[int, str] = {}
        entries: dict[str, str] = {}
        for raw in cur.fetchall():
            values = raw[1:] if has_rowid else raw
            record = dict(zip(cols, values, strict=True))
            key = _key_json([record[c] for c in pk])
            rows[key] = record
            entries[key] = _entry(key, _row_json(record))
            if has_rowid:
                rowid_key[raw[0]] = key
        return rows, rowid_key, entries

    @staticmethod
    def _hash(table_json: dict[str, str]) -> str:
        return _tables_hash(table_json)

    def begin(self) -> None:
        """Open the transaction that `rollback()` will undo."""
        if not self.valid:
            raise RuntimeError("the tracked state was invalidated; build a new TrackedState")
        self.conn.execute("BEGIN")
        self._open = True

    def current(self, hashed: bool = True) -> TrackedView:
        """The dump, state hash and changed rows of the state now.

        The dump holds the same rows as `canonical_dump` (rows of changed tables are not
        re-sorted: compare dumps as dicts, never by iteration order); the hash equals
        `hash_dump(canonical_dump(conn))` and the changes equal `diff_dumps(base, now)`.
        With `hashed` False the hash is left empty ("") and not computed (for a caller that
        only needs the rows)."""
        if self._open and not self.conn.in_transaction:
            self.valid = False
            raise RuntimeError(
                "a write ended the tracked transaction; the tracker is no longer valid")
        logged: dict[str, list[int]] = {}
        for table, rid in self.conn.execute(f"SELECT DISTINCT tbl, rid FROM {_LOG}"):
            logged.setdefault(table, []).append(rid)
        if not logged and not self.no_rowid:
            return TrackedView(self.rows, self.base_hash, {}, {})
        dump: Dump = dict(self.rows)
        table_json = dict(self.table_json)
        before: Dump = {}
        after: Dump = {}
        for table in self.no_rowid:
            rows, _, entries = self._read_table(table)
            if entries != self.entries[table]:
                dump[table] = dict(sorted(rows.items()))
                table_json[table] = _table_json(entries)
                before[table], after[table] = self.rows[table], dump[table]
        for table, rids in logged.items():
            base_rows = self.rows[table]
            base_entries = self.entries[table]
            rowid_key = self.rowid_key[table]
            pk = self.pk[table]
            cur = self.conn.execute(f'SELECT rowid, * FROM "{table}" WHERE rowid IN '
                                    f'({",".join("?" * len(rids))})', rids)
            cols = [d[0] for d in cur.description][1:]
            removed = {rowid_key[rid] for rid in rids if rid in rowid_key}
            new_rows: dict[str, dict[str, Any]] = {}
            for raw in cur.fetchall():
                record = dict(zip(cols, raw[1:], strict=True))
                key = _key_json([record[c] for c in pk])
                new_rows[key] = record
            changed = {k: r for k, r in new_rows.items() if base_rows.get(k) != r}
            gone = removed - new_rows.keys()
            if not changed and not gone:
                continue
            rows = dict(base_rows)
            for k in gone:
                del rows[k]
            rows.update(changed)
            dump[table] = rows
            touched = gone | changed.keys()
            before[table] = {k: base_rows[k] for k in touched if k in base_rows}
            after[table] = {k: rows[k] for k in touched if k in rows}
            if not hashed:
                continue
            entries = {k: _entry(k, _row_json(r)) for k, r in changed.items()}
            if gone or not entries.keys() <= self.pos[table].keys():
                merged = {**base_entries, **entries}
                for k in gone:
                    del merged[k]
                table_json[table] = _table_json(merged)
            else:
                parts = self.parts[table].copy()
                pos = self.pos[table]
                for k, e in entries.items():
                    parts[pos[k]] = e
                table_json[table] = "{" + ",".join(parts) + "}"
        return TrackedView(dump, self._hash(table_json) if hashed else "", before, after)

    def rollback(self) -> None:
        """Undo everything since `begin()`: the connection holds the base state again."""
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        elif self._open:
            self.valid = False
        self._open = False


# -- a copied state's hash, re-reading only the tables its statements may have written --

_WRITES = frozenset({sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})
# Statements that change the main schema or the set of databases: a watched hash gives up.
_SCHEMA_CHANGES = frozenset({
    sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_CREATE_TABLE, sqlite3.SQLITE_CREATE_TRIGGER,
    sqlite3.SQLITE_CREATE_VIEW, sqlite3.SQLITE_DROP_INDEX, sqlite3.SQLITE_DROP_TABLE,
    sqlite3.SQLITE_DROP_TRIGGER, sqlite3.SQLITE_DROP_VIEW, sqlite3.SQLITE_ALTER_TABLE,
    sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_CREATE_VTABLE, sqlite3.SQLITE_DROP_VTABLE})


class WriteWatch:
    """A connection's authorizer that notes every main-schema table its statements may write.

    SQLite calls an authorizer while it compiles a statement, trigger bodies included (an
    insert that fires a trigger reports the trigger's updates of other tables too), so a
    table is noted before any execution can change it; a statement reused from the statement
    cache was noted when first compiled. Compiled-but-harmless writes (an update that
    matches no row, a call rolled back) are noted as well: the set is a superset of the
    tables that changed. A schema change (or ATTACH) sets `lost`: the set no longer tells.
    Temporary tables (`temp` schema: trace and change logs) are not state and are ignored.
    """

    def __init__(self) -> None:
        self.tables: set[str] = set()
        self.lost = False

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db: str | None,
                 trigger: str | None) -> int:
        if action in _WRITES:
            if db != "temp" and arg1 is not None:
                self.tables.add(arg1)
        elif action in _SCHEMA_CHANGES:
            self.lost = True
        return sqlite3.SQLITE_OK


# a table's rows as SQLite returns them -> (row key, JSON entry, the values' types)
Entries = dict[tuple[Any, ...], tuple[str, str, tuple[type, ...]]]


def table_entries(conn: sqlite3.Connection, table: str, pk: list[str],
                  known: Entries | None = None) -> Entries:
    """Each row of `table` (as SQLite returns it) with its key and JSON entry as
    `hash_dump` writes them. A row found in `known` with values of the same types reuses its
    entry (no JSON encoding). Equal tuples can still be written differently (1 and 1.0, 0.0
    and -0.0): hence the types, and a row with a float and a zero is always encoded."""
    cur = conn.execute(f'SELECT * FROM "{table}"')
    cols = [d[0] for d in cur.description]
    idx = [cols.index(c) for c in pk]
    known = known or {}
    out: Entries = {}
    for raw in cur.fetchall():
        types = tuple(map(type, raw))
        hit = known.get(raw)
        if hit is None or hit[2] != types or (float in types and 0 in raw):
            key = _key_json([raw[i] for i in idx])
            hit = (key, _entry(key, _row_json(dict(zip(cols, raw, strict=True)))), types)
        out[raw] = hit
    return out


def table_json(entries: Entries) -> str:
    """One table of `canonical_dump` as `hash_dump` writes it: `{"<key>":{row},...}` (rows
    with equal keys, possible only without a primary key, are equal and written once)."""
    return _table_json({key: entry for key, entry, _ in entries.values()})


def _tables_hash(jsons: dict[str, str]) -> str:
    body = "{" + ",".join(_str_json(t) + ":" + jsons[t] for t in sorted(jsons)) + "}"
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class StateHashes:
    """A state's tables as canonical JSON and its hash (`state_hash`), kept once per initial
    state so that a copy of it is hashed by re-reading only the tables it wrote (`rehash`)."""

    pk: dict[str, list[str]]
    rows: dict[str, Entries]
    jsons: dict[str, str]
    hash: str

    @classmethod
    def of(cls, conn: sqlite3.Connection) -> StateHashes:
        pk = {t: primary_key(conn, t) for t in tables(conn)}
        rows = {t: table_entries(conn, t, k) for t, k in pk.items()}
        jsons = {t: table_json(e) for t, e in rows.items()}
        return cls(pk, rows, jsons, _tables_hash(jsons))

    def rehash(self, conn: sqlite3.Connection, written: set[str]) -> str:
        """`state_hash(conn)` for a copy of this state whose statements wrote at most the
        tables `written` (names that are not tables, such as views, are skipped). Those are
        re-read; their unchanged rows keep their JSON."""
        changed = [t for t in written if t in self.jsons]
        if not changed:
            return self.hash
        jsons = dict(self.jsons)
        for t in changed:
            jsons[t] = table_json(table_entries(conn, t, self.pk[t], self.rows[t]))
        return _tables_hash(jsons)
