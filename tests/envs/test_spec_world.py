"""Worlds compiled from a JSON spec (`envs.spec_world`): a spec tool's SQL runs with its
errors mapped to rules, and `SpecDesign` builds variants, calls and goals from the spec."""

from __future__ import annotations

import random
import sqlite3

import pytest

from envs import state as st
from envs.design import Variant
from envs.spec_world import SpecDesign, run_tool, write_target
from envs.tools import ToolError

SCHEMA = """
PRAGMA foreign_keys = ON;
CREATE TABLE members (member_id TEXT PRIMARY KEY, name TEXT);
CREATE TABLE loans (loan_id TEXT PRIMARY KEY, member_id TEXT NOT NULL REFERENCES members (member_id),
                    status TEXT NOT NULL DEFAULT 'active');
INSERT INTO members VALUES ('m1', 'Ada');
"""
LEND = {"name": "lend", "write": True, "parameters": [
            {"name": "loan_id", "type": "string"}, {"name": "member_id", "type": "string", "source": "members.member_id"}],
        "sql": ["INSERT INTO loans (loan_id, member_id) VALUES (:loan_id, :member_id)"],
        "returns": "SELECT loan_id, status FROM loans WHERE loan_id = :loan_id"}
CLOSE = {"name": "close_loan", "write": True, "parameters": [{"name": "loan_id", "type": "string"}],
         "sql": ["UPDATE loans SET status = 'returned' WHERE loan_id = :loan_id"], "returns": None}
GET = {"name": "get_member", "write": False, "parameters": [{"name": "member_id", "type": "string"}],
       "sql": [], "returns": "SELECT * FROM members WHERE member_id = :member_id"}
FK = [{"id": "R01_MEMBER_EXISTS", "table": "loans", "column": "member_id", "references": "members(member_id)"}]
SPEC = {"tools": [LEND, CLOSE, GET], "probes": [
    {"rule": "R01_MEMBER_EXISTS", "violating": {"name": "lend", "arguments": {"loan_id": "L9", "member_id": "ghost"}},
     "valid": {"name": "lend", "arguments": {"loan_id": "L1", "member_id": "m1"}}}]}


@pytest.fixture()
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    return conn


def test_write_target() -> None:
    assert write_target("INSERT OR REPLACE INTO loans VALUES (1)") == "loans"
    assert write_target('  update "members" SET name = 1') == "members"
    assert write_target("DELETE FROM loans WHERE 1") == "loans" and write_target("SELECT * FROM loans") is None


def test_run_tool_maps_failures(db: sqlite3.Connection) -> None:
    assert run_tool(db, LEND, {"loan_id": "L1", "member_id": "m1"}, FK) == [{"loan_id": "L1", "status": "active"}]
    assert run_tool(db, CLOSE, {"loan_id": "L1"}) == {"ok": True, "rows_changed": 1}
    with pytest.raises(ToolError) as info:
        run_tool(db, CLOSE, {"loan_id": "nope"})
    assert info.value.code == "NOT_FOUND"
    with pytest.raises(ToolError) as info:
        run_tool(db, LEND, {"loan_id": "L2", "member_id": "ghost"}, FK)
    assert info.value.code == "R01_MEMBER_EXISTS"
    with pytest.raises(sqlite3.IntegrityError):  # no rule for it: the environment maps it
        run_tool(db, LEND, {"loan_id": "L1", "member_id": "m1"}, FK)
    assert run_tool(db, GET, {"member_id": "m1"}) == [{"member_id": "m1", "name": "Ada"}]


def test_spec_design_hooks(db: sqlite3.Connection) -> None:
    design = SpecDesign(SPEC)
    assert design.written_tables == {"loans"}
    (variant,) = design.variants(db, random.Random(0), 1)
    assert variant.kind == "probe_R01_MEMBER_EXISTS" and variant.rules == ["R01_MEMBER_EXISTS"]
    calls = design.candidate_calls(db, variant.focus)
    assert calls[0].arguments == {"loan_id": "L1", "member_id": "m1"} and len({c.key() for c in calls}) == len(calls)
    assert {c.name for c in calls} == {"lend"}
    assert [c.name for c in design.lookup_calls(variant.focus)] == ["get_member"]
    before = st.restore(st.snapshot(db))
    run_tool(db, LEND, {"loan_id": "L1", "member_id": "m1"}, FK)
    changes = st.diff_states(before, db)
    goal = design.describe(changes, before, db, variant)
    assert goal is not None and "have a new loans record for loan_id L1, member_id m1" in goal.instruction
    assert goal.known_info == {"loan_id": "L1", "member_id": "m1"}
    assert design.goal_score(changes, variant) > design.goal_score([], variant)
    assert design.describe([], before, db, variant) is None
    assert design.describe([], before, db, Variant("k", [], {}, [], allow_no_change=True)) is not None
    assert SpecDesign({"tools": []}).variants(db, random.Random(0), 3) == []
