"""Compiled rules of a world's schema: where each rule is enforced, and which rules a path
of tool calls exercises.

A rule is compiled as a trigger that raises `<RULE_ID>: message`, as a named CHECK
(`CONSTRAINT R02_SEATS CHECK (...)`), or as a foreign key declared by a schema comment
`-- R05_NAME: foreign key table.column references parent(column)`. Each place a rule is enforced is a `Guard`:
the table and event (INSERT, UPDATE of some columns, DELETE) on which SQLite evaluates it.
`trace_rules` replays calls with temporary tracing triggers on the same events, so it
reports every rule whose guard a successful write (or one of its side effects) evaluated.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from data.records import StateRef, ToolCall
from envs.world import World

RULE_ID = re.compile(r"\b(R\d+_[A-Z0-9_]+)\b")
_TRIGGER_HEAD = re.compile(
    r"CREATE\s+(?:TEMP\s+|TEMPORARY\s+)?TRIGGER\s+(?:IF\s+NOT\s+EXISTS\s+)?[\w\"\.]+\s+"
    r"(?:BEFORE|AFTER|INSTEAD\s+OF)?\s*(INSERT|DELETE|UPDATE)(?:\s+OF\s+(.+?))?\s+ON\s+[\"\w\.]+",
    re.IGNORECASE | re.DOTALL,
)
FK_COMMENT = re.compile(r"--\s*(R\d+_[A-Z0-9_]+):\s*foreign key\s+(\w+)\.(\w+)", re.IGNORECASE)
_CHECK = re.compile(r"CONSTRAINT\s+(R\d+_[A-Z0-9_]+)\s+CHECK\s*\(", re.IGNORECASE)


@dataclass(frozen=True)
class Guard:
    """One place a rule is enforced: `kind` is "trigger" or "check"."""

    rule: str
    kind: str
    table: str
    event: str  # INSERT, UPDATE or DELETE
    columns: tuple[str, ...] = ()  # UPDATE OF these columns (empty: any column)
    name: str = ""  # trigger name, or the CHECK's rule id


def _balanced(text: str, start: int) -> str:
    """The text inside the parenthesis that opens just before `start`."""
    depth = 1
    i = start
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1]


def guards(conn: sqlite3.Connection) -> list[Guard]:
    """Every rule guard in the schema loaded into `conn` (read from `sqlite_master`)."""
    out: list[Guard] = []
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"
                        " WHERE type IN ('table', 'trigger') AND sql IS NOT NULL ORDER BY name").fetchall()
    for kind, name, table, sql in rows:
        if kind == "trigger":
            m = _TRIGGER_HEAD.match(sql.strip())
            if m is None:
                continue
            cols = tuple(c.strip().strip('"') for c in m.group(2).split(",")) if m.group(2) else ()
            for rule in sorted(set(RULE_ID.findall(sql))):
                out.append(Guard(rule, "trigger", table, m.group(1).upper(), cols, name))
            continue
        columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall()]
        for m in _CHECK.finditer(sql):
            expr = _balanced(sql, m.end())
            used = tuple(c for c in columns if re.search(rf"\b{re.escape(c)}\b", expr))
            out.append(Guard(m.group(1), "check", table, "INSERT", (), m.group(1)))
            out.append(Guard(m.group(1), "check", table, "UPDATE", used, m.group(1)))
    return out


@lru_cache(maxsize=64)
def schema_guards(schema_sql: str) -> tuple[Guard, ...]:
    """The guards of a schema script (loaded into a scratch in-memory database)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema_sql)
        found = guards(conn)
    finally:
        conn.close()
    for m in FK_COMMENT.finditer(schema_sql):  # foreign keys carry their rule id in a comment
        rule, table, column = m.groups()
        found += [Guard(rule, "foreign_key", table, "INSERT", (), rule),
                  Guard(rule, "foreign_key", table, "UPDATE", (column,), rule)]
    return tuple(found)


TRACE_TABLE = "_trajforge_rule_trace"


def install_trace(conn: sqlite3.Connection, rule_guards: Iterable[Guard]) -> None:
    """Temporary triggers that log a guard's rule id whenever its event fires. They live in
    the `temp` schema, so state dumps and hashes (main schema only) do not see them; a
    rolled-back call rolls its log rows back too."""
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {TRACE_TABLE} (rule TEXT NOT NULL)")
    for i, g in enumerate(rule_guards):
        event = g.event if g.event != "UPDATE" or not g.columns else \
            "UPDATE OF " + ", ".join(f'"{c}"' for c in g.columns)
        conn.execute(f'CREATE TEMP TRIGGER "_trajforge_trace_{i}" BEFORE {event} ON main."{g.table}"'
                     f" BEGIN INSERT INTO {TRACE_TABLE} (rule) VALUES ('{g.rule}'); END")


def read_trace(conn: sqlite3.Connection) -> list[str]:
    """Rule ids logged so far (sorted, distinct)."""
    return [r[0] for r in conn.execute(f"SELECT DISTINCT rule FROM {TRACE_TABLE} ORDER BY rule")]


def trace_rules(world: World, ref: StateRef, calls: Iterable[ToolCall]) -> list[str]:
    """Rule ids whose guards the successful calls of `calls` evaluated, replayed on a fresh
    copy of `ref` (side effects of AFTER triggers included)."""
    conn = world.build_state(ref.seed, ref.scale, ref.patches)
    try:
        install_trace(conn, schema_guards(world.schema_sql))
        env = world.env(conn=conn)
        for call in calls:
            env.call(call)
        return read_trace(conn)
    finally:
        conn.close()

