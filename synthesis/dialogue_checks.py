"""Checks of a task's user-facing text and reference dialogue, shared by the tests and
`bench/data_quality.py` (issue 36):

- `unseen_lookups`: a read in the reference dialogue whose id argument nobody showed yet (the
  user did not say it, no earlier tool result holds it): the gold must search or ask first;
- `untold_ids`: an id a write created (a new record's key in the write's result) that no later
  assistant reply tells, by the id itself or by how the record is named to a user;
- `artefacts`: template artefacts in a text ("unit(s)", "a annual", "suit I", "1 refills",
  a raw snake_case enum value of the world's schema or tools);
- `self_play_problems`: a self-play instruction that states an internal id, asks about a date
  already past in the world, or has the agent present the user's own arithmetic as a record;
  `is_trivial`: a task that changes nothing and makes at most one lookup of its own.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from data.records import Task, ToolCall
from envs import state as st
from envs.conversation import (
    argument_values,
    conversation,
    dates_in,
    internal_id_columns,
    leaked_ids,
    mentions_name,
    record_of,
    said_alone,
    value_mentions,
)
from envs.sql import today
from envs.stock_tools import TRANSFER_TOOL
from envs.world import World

said = said_alone  # an id inside a longer id does not count: "AC100027" is not said by "bill_AC100027_2026-05"
CALCULATE = "calculate"


def _is_id_arg(conn: sqlite3.Connection, name: str, value: str) -> bool:
    return name.endswith(("_id", "_ids")) or record_of(conn, value) is not None


def _steps(world: World, task: Task) -> list[tuple[str, str, ToolCall | None, str]]:
    """The reference dialogue replayed from the task's initial state: (role, text, call,
    result) per user turn, assistant text and tool call, in order."""
    out: list[tuple[str, str, ToolCall | None, str]] = []
    env = world.env(task.initial_state)
    try:
        for turn in task.dialogue:
            if turn.content:
                out.append((turn.role, turn.content, None, ""))
            for call in turn.tool_calls:
                obs = env.call(ToolCall(name=call.name, arguments=dict(call.arguments)))
                out.append(("tool", "", call, obs.content))
    finally:
        env.close()
    return out


def unshown_ids(conn: sqlite3.Connection, call: ToolCall, shown: list[str]) -> list[str]:
    """The id arguments of `call` ("name=value") that none of the texts `shown` states."""
    return [f"{name}={v}" for name, value in call.arguments.items() for v in argument_values(value)
            if _is_id_arg(conn, name, v) and not any(said(s, v) for s in shown)]


def unseen_lookups(world: World, task: Task) -> list[str]:
    """The reads of `task.dialogue` with an id argument that no earlier user turn or tool
    result states (``"get_provider_details(provider_id=dr_li_101)"``)."""
    tools = world.tools
    shown: list[str] = []
    out: list[str] = []
    env = world.env(task.initial_state)
    try:
        for role, text, call, result in _steps(world, task):
            if call is None:
                if role == "user":
                    shown.append(text)
                continue
            spec = tools.get(call.name)
            if spec is not None and not spec.write and call.name != TRANSFER_TOOL:
                out += [f"{call.name}({arg})" for arg in unshown_ids(env.conn, call, shown)]
            shown.append(result)
    finally:
        env.close()
    return out


def _keys(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """Per table with a one-column primary key (the ledger and meta aside), its keys."""
    out: dict[str, set[str]] = {}
    for table in st.tables(conn):
        pk = st.primary_key(conn, table)
        if len(pk) == 1 and not table.startswith("_") and table not in ("meta", "ledger"):
            out[table] = {str(r[0]) for r in conn.execute(f'SELECT "{pk[0]}" FROM "{table}"')}
    return out


def untold_ids(world: World, task: Task) -> list[str]:
    """The ids the dialogue's writes created (new keys that the write's result shows) that no
    later assistant reply tells, by the id or by a name of its record (`value_mentions`). A
    world-internal id (`internal_id_columns`: a payment or fill record) that has no name a
    user knows is not told: the user would not know what it is."""
    conv = conversation(world)
    facing = conv.user_facing_ids
    tools = world.tools
    env = world.env(task.initial_state)
    created: list[tuple[int, list[str | tuple[str, ...]], str]] = []  # (step, names, id)
    replies: list[tuple[int, str]] = []
    try:
        step = 0
        for turn in task.dialogue:
            if turn.role == "assistant" and turn.content:
                replies.append((step, turn.content))
            step += 1
            for call in turn.tool_calls:
                spec = tools.get(call.name)
                if spec is None or not spec.write:
                    continue
                before = _keys(env.conn)
                obs = env.call(ToolCall(name=call.name, arguments=dict(call.arguments)))
                if not obs.ok:
                    continue
                internal = {t for t, _ in internal_id_columns(env.conn, list(facing))} if facing is not None else set()
                for table, keys in _keys(env.conn).items():
                    for key in sorted(keys - before.get(table, set())):
                        names = value_mentions(conv, env.conn, key)
                        if said(obs.content, key) and (table not in internal or len(names) > 1):
                            created.append((step, names, key))
            step += 1
    finally:
        env.close()
    return [key for at, names, key in created
            if not any(mentions_name(text, n) for s, text in replies if s >= at for n in names)]


# -- template artefacts ------------------------------------------------------------------------

_PLURAL_MARK = re.compile(r"\b[A-Za-z]+\((?:s|es)\)")
_A_VOWEL = re.compile(r"\b[Aa] (?!(?:uni|use|usu|uti|ur[aio]|one|once|eu)[a-z]*\b)([aeiou][a-z]*|8\d*|11|18)\b")
_AN_CONSONANT = re.compile(r"\b[Aa]n (?!(?:hour|honest|honou?r|heir|herb)[a-z]*\b)([bcdfgjklmnpqrstvwxyz][a-z]*)\b")
_OBJECT_I = re.compile(r"\b(?:suits?|for|with|help|helps|tell|give|call|contact|email|send|ask|thank|to|from|"
                       r"about|let|lets) I\b(?!')")
_SUBJECT_ME = re.compile(r"(?:^|[.!?;:]\s+|\band )(?:me|him|her|them) (?:am|is|are|have|has|want|need|would|will)\b",
                         re.I)
_PRONOUN_VERB = re.compile(r"\b(?:I (?:is|has|does)|you (?:is|has|does|was))\b")
_ONE_PLURAL = re.compile(r"(?<![\d.,$])1 ([a-z]+)\b")
_MANY_SINGULAR = re.compile(r"(?<![\d.,$])(?:[02-9]|\d{2,}) (unit|refill|passenger|bag|seat|item|ticket|dose|"
                            r"line|night)\b(?!-)")
_ONE_VERB = re.compile(r"(?<![\d.,$])1 [a-z]+ (?:remain|are|were|have)\b")
_PLURAL_IS = re.compile(r"\bthe (?:[a-z-]+ )*?([a-z]+s)(?: left| remaining| used| owed)? is\b")
_NOT_PLURAL = ("ss", "us", "is", "ics", "ys'", "ous")
_NOT_PLURAL_WORDS = {"this", "plus", "status", "address", "bonus", "news", "series", "always", "its", "yours",
                     "ours", "hers", "his", "was", "has", "does", "as", "gas", "bus", "yes", "lens", "canvas"}


def _plural(word: str) -> bool:
    return (word.endswith("s") and len(word) > 3 and not word.endswith(_NOT_PLURAL)
            and word not in _NOT_PLURAL_WORDS)


def enum_values(world: World) -> frozenset[str]:
    """The snake_case values of the world's enums (tool parameters and the schema's
    ``CHECK (... IN (...))`` lists): said raw, they are template artefacts."""
    if world.name not in _ENUMS:
        _ENUMS[world.name] = _enum_values(world)
    return _ENUMS[world.name]


_ENUMS: dict[str, frozenset[str]] = {}


def _enum_values(world: World) -> frozenset[str]:
    values: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            values.update(str(v) for v in node.get("enum", []) if isinstance(v, str))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for spec in world.tools.values():
        walk(spec.parameters)
    for group in re.findall(r"\bIN\s*\(([^)]*)\)", world.schema_sql, re.I):
        values.update(re.findall(r"'([^']*)'", group))
    return frozenset(v for v in values if re.fullmatch(r"[a-z]+(?:_[a-z0-9]+)+", v))


def artefacts(world: World, text: str) -> list[str]:
    """Template artefacts in `text` (each as found)."""
    out = [m.group(0) for m in _PLURAL_MARK.finditer(text)]
    out += [m.group(0) for rx in (_A_VOWEL, _AN_CONSONANT, _OBJECT_I, _SUBJECT_ME, _PRONOUN_VERB, _MANY_SINGULAR,
                                  _ONE_VERB) for m in rx.finditer(text)]
    out += [m.group(0) for m in _ONE_PLURAL.finditer(text) if _plural(m.group(1))]
    out += [m.group(0) for m in _PLURAL_IS.finditer(text) if _plural(m.group(1)) and "number of" not in m.group(0)]
    enums = enum_values(world)
    out += [tok for tok in re.findall(r"(?<![A-Za-z0-9_])[a-z]+(?:_[a-z0-9]+)+(?![A-Za-z0-9_])", text)
            if tok in enums]
    return out


def task_artefacts(world: World, task: Task) -> list[str]:
    """Template artefacts in the instruction and in the dialogue's user and assistant text."""
    texts = [task.instruction, *(t.content for t in task.dialogue if t.content)]
    return [a for text in texts for a in artefacts(world, text)]


# -- self-play ---------------------------------------------------------------------------------

def past_dates(world: World, task: Task) -> list[str]:
    """Dates the instruction asks about that are before the world's today (`meta.now`)."""
    env = world.env(task.initial_state)
    try:
        day = today(env.conn)
    finally:
        env.close()
    found = []
    for d in dates_in(task.instruction):
        iso = d if len(d) == 10 else f"{day.year}-{d}"
        if iso < day.isoformat():
            found.append(iso)
    return sorted(set(found))


def records_own_arithmetic(task: Task) -> bool:
    """Whether the dialogue presents the result of a calculation the user asked for as a
    record ("According to our records, the amount is 405")."""
    calc = any(c.name == CALCULATE for t in task.dialogue for c in t.tool_calls)
    return calc and any(re.search(r"our records|I've looked it up|I found", t.content or "", re.I)
                        and re.search(r"\bamount\b", t.content or "") for t in task.dialogue
                        if t.role == "assistant")


def self_play_problems(world: World, task: Task) -> list[str]:
    """What a self-play instruction must not do: state an internal id (``internal_id:X``),
    ask about a past date (``past:DATE``), or get its own arithmetic told as a record
    (``arithmetic_as_record``)."""
    env = world.env(task.initial_state)
    try:
        out = [f"internal_id:{i}" for i in leaked_ids(world, env.conn, [task.instruction])]
    finally:
        env.close()
    out += [f"past:{d}" for d in past_dates(world, task)]
    if records_own_arithmetic(task):
        out.append("arithmetic_as_record")
    return out


def own_calls(task: Task) -> list[dict[str, Any]]:
    """The task's own calls: a self-play generation's gold calls, else its reference."""
    gold = task.metadata.get("gold_calls")
    return list(gold) if gold else [c.model_dump() for c in task.reference_solution]


def is_trivial(world: World, task: Task) -> bool:
    """A task that writes nothing and makes at most one call of its own (its identity lookup
    aside): one lookup and its answer."""
    calls = own_calls(task)
    tools = world.tools
    writes = any(c["name"] in tools and tools[c["name"]].write and c["name"] != TRANSFER_TOOL for c in calls)
    return not writes and len(calls) <= 1

