"""Worlds compiled from a JSON spec (the Architect's output, `synthesis/architect.py`).

A spec world's folder holds `spec.json` next to the usual files. Its `tools.py` is generated:
one typed function per tool that calls `run_tool`, which runs the tool's SQL statements
(named parameters `:name`) and its `returns` query. Its `design.py` binds `SpecDesign`, the
generic synthesis hooks: variants that focus on one compiled rule's probe calls, candidate
calls whose arguments come from the probes and the database, and a projection of a state
change to a goal that names records and values, never tool calls.

Spec shapes (all JSON):

- tool: ``{"name", "description", "write": bool, "parameters": [{"name", "type":
  "string|integer|number|boolean", "description", "enum"?, "default"?, "source"?:
  "table.column"}], "sql": [statements], "returns": "SELECT ..." | null}``
- foreign-key rule: ``{"id", "table", "column", "references": "parent(column)"}``
- probe: ``{"rule", "violating": {"name", "arguments"}, "valid": {"name", "arguments"}}``
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import re
import sqlite3
from pathlib import Path
from typing import Any

from data.records import ToolCall
from envs import sql as kit
from envs.conversation import ACCOUNT_KEYS
from envs.design import Goal, Variant
from envs.state import CellChange, primary_key
from envs.tools import ToolError

WRITE_TARGET = re.compile(r"^\s*(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+\"?(\w+)",
                          re.IGNORECASE)
FK_REF = re.compile(r"^\s*(\w+)\s*\(\s*(\w+)\s*\)\s*$")


def write_target(sql: str) -> str | None:
    """The table an INSERT/UPDATE/DELETE statement writes (None for anything else)."""
    m = WRITE_TARGET.match(sql)
    return m.group(1) if m else None




def _fk_rule(db: sqlite3.Connection, sql: str, args: dict[str, Any], fk_rules: list[dict[str, Any]]) -> str | None:
    """The foreign-key rule a failed write broke: the rule of the written table whose column
    value (the argument of the same name) has no parent row; else the table's first rule."""
    table = write_target(sql)
    rules = [r for r in fk_rules if r["table"] == table]
    for r in rules:
        m = FK_REF.match(r["references"])
        if m and r["column"] in args:
            parent, col = m.groups()
            if db.execute(f'SELECT 1 FROM "{parent}" WHERE "{col}" = ?', (args[r["column"]],)).fetchone() is None:
                return str(r["id"])
    return str(rules[0]["id"]) if rules else None


def run_tool(db: sqlite3.Connection, spec: dict[str, Any], args: dict[str, Any],
             fk_rules: list[dict[str, Any]] | None = None) -> Any:
    """Run a spec tool: its statements in order, then its `returns` query.

    A write whose statements change no row raises `NOT_FOUND`; a foreign-key failure on a
    table with a foreign-key rule raises that rule's id. Trigger and CHECK failures propagate
    as `sqlite3.IntegrityError` (the environment maps them to the rule they name)."""
    changed = 0
    for sql in spec.get("sql") or []:
        try:
            cur = db.execute(sql, args)
        except sqlite3.IntegrityError as exc:
            if "FOREIGN KEY" in str(exc):
                rule = _fk_rule(db, sql, args, fk_rules or [])
                if rule:
                    raise ToolError(rule, f"{rule}: a referenced record does not exist") from exc
            raise
        changed += max(cur.rowcount, 0)
    if spec.get("write") and spec.get("sql") and changed == 0:
        raise ToolError("NOT_FOUND", f"{spec['name']}: no record matches {args}")
    if spec.get("returns"):
        return kit.rows(db, spec["returns"], args)
    return {"ok": True, "rows_changed": changed}


def _account_ids(conn: sqlite3.Connection, table: str, key: str) -> dict[str, str]:
    """The account ids (`ACCOUNT_KEYS` columns, e.g. ``member_id``) of the record `key` (a
    change's JSON primary-key values) of `table` in `conn`: whose record it is, which its
    user knows and identifies with."""
    pk = primary_key(conn, table)
    values = json.loads(key)
    if len(values) != len(pk):
        return {}
    where = " AND ".join(f'"{c}" IS ?' for c in pk)
    cur = conn.execute(f'SELECT * FROM "{table}" WHERE {where}', values)
    row = cur.fetchone()
    if row is None:
        return {}
    cols = [d[0] for d in cur.description]
    return {c: str(v) for c, v in zip(cols, row, strict=True) if c in ACCOUNT_KEYS and v is not None}


class SpecDesign:
    """Generic synthesis hooks for a spec world (see `envs/design.py` for the contract)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.tools: dict[str, dict[str, Any]] = {t["name"]: t for t in spec["tools"]}
        self.probes: list[dict[str, Any]] = list(spec.get("probes") or [])
        self.written_tables = {write_target(s) for t in self.tools.values() if t.get("write")
                               for s in t.get("sql") or []} - {None}

    @classmethod
    def from_folder(cls, folder: Path | str) -> SpecDesign:
        return cls(json.loads((Path(folder) / "spec.json").read_text()))

    def variants(self, conn: sqlite3.Connection, rng: random.Random, n: int) -> list[Variant]:
        """One variant per compiled rule (cycling from a random start): the seeded state, with
        the focus on that rule's probe calls, which sit one step either side of its limit."""
        if not self.probes:
            return []
        start = rng.randrange(len(self.probes))
        out = []
        for i in range(n):
            p = self.probes[(start + i) % len(self.probes)]
            calls = [p["valid"], p["violating"]]
            out.append(Variant(kind=f"probe_{p['rule']}", patches=[], rules=[p["rule"]], persona="boundary",
                               focus={"rule": p["rule"], "calls": calls},
                               note=f"the valid and violating probe of {p['rule']}"))
        return out

    def _values(self, conn: sqlite3.Connection, param: dict[str, Any], focus: dict[str, Any]) -> list[Any]:
        seen = [c["arguments"][param["name"]] for c in focus.get("calls", []) if param["name"] in c["arguments"]]
        if "enum" in param:
            seen += list(param["enum"])
        source = param.get("source")
        if source and "." in source:
            table, col = source.split(".", 1)
            with contextlib.suppress(sqlite3.Error):
                seen += [r[0] for r in conn.execute(f'SELECT DISTINCT "{col}" FROM "{table}" ORDER BY 1 LIMIT 3')]
        return list(dict.fromkeys(seen))[:4]

    def candidate_calls(self, conn: sqlite3.Connection, focus: dict[str, Any]) -> list[ToolCall]:
        """The focus calls, then write calls combining values from the probes and the database."""
        calls = [ToolCall(name=c["name"], arguments=dict(c["arguments"])) for c in focus.get("calls", [])]
        focus_tools = {c["name"] for c in focus.get("calls", [])}
        for name, t in self.tools.items():
            if not t.get("write") or name not in focus_tools:
                continue
            required = [p for p in t["parameters"] if "default" not in p]
            pools = [self._values(conn, p, focus) for p in required]
            if any(not pool for pool in pools):
                continue
            for combo in itertools.islice(itertools.product(*pools), 24):
                calls.append(ToolCall(name=name, arguments={p["name"]: v for p, v in zip(required, combo, strict=True)}))
        return list({c.key(): c for c in calls}.values())

    def lookup_calls(self, focus: dict[str, Any]) -> list[ToolCall]:
        """Read tools whose required arguments the valid focus call supplies."""
        args = focus["calls"][0]["arguments"] if focus.get("calls") else {}
        out = []
        for name, t in self.tools.items():
            required = [p["name"] for p in t["parameters"] if "default" not in p]
            if not t.get("write") and required and all(r in args for r in required):
                out.append(ToolCall(name=name, arguments={r: args[r] for r in required}))
        return out

    def describe(self, changes: list[CellChange], before: sqlite3.Connection, after: sqlite3.Connection,
                 variant: Variant) -> Goal | None:
        """The goal as the records and values the user wants to end up with (changes to tables
        the tools write directly; trigger side effects elsewhere are implied)."""
        rows: dict[tuple[str, str], dict[str, CellChange]] = {}
        for c in changes:
            if c.table in self.written_tables:
                rows.setdefault((c.table, c.key), {})[c.column] = c
        parts: list[str] = []
        known: dict[str, str] = {}
        for (table, key), cols in sorted(rows.items()):
            op = next(iter(cols.values())).op
            record = key.strip("[]").replace('"', "")
            if op == "insert":
                ids = {c: ch.after for c, ch in cols.items() if c.endswith("_id") and ch.after is not None}
                known.update({c: str(v) for c, v in ids.items()})
                parts.append(f"have a new {table} record for " + ", ".join(f"{c} {v}" for c, v in sorted(ids.items())))
            elif op == "update":
                known[f"{table} record"] = record
                known.update(_account_ids(before, table, key))
                parts.append(f"have {table} record {record} show " +
                             ", ".join(f"{c} {ch.after}" for c, ch in sorted(cols.items())))
            else:
                known[f"{table} record"] = record
                known.update(_account_ids(before, table, key))
                parts.append(f"have {table} record {record} removed")
        if not parts:
            if not variant.allow_no_change:
                return None
            return Goal(instruction="You want to know whether your request is allowed.", reason="a question",
                        known_info=known)
        return Goal(instruction="You want to " + "; and ".join(parts) + ".", reason="a request",
                    known_info=known, unknown_info=["whether the policy allows it"])

    def goal_score(self, changes: list[CellChange], variant: Variant) -> float:
        """Prefer the state the valid probe call reaches: changes that mention its arguments."""
        calls = variant.focus.get("calls") or []
        wanted = {str(v) for v in calls[0]["arguments"].values()} if calls else set()
        hit = any(str(c.after) in wanted or any(w in c.key for w in wanted) for c in changes)
        return (2.0 if hit else 0.0) - 0.01 * len(changes)
