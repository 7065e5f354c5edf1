"""Set Designer: boundary-adjacent initial states (LOGIGEN §1).

The world's `variants` hook proposes patches to a seeded base state that put a value one
step from a compiled rule's limit (one seat left, a balance one unit short, a booking 23
or 25 hours old). The designer applies them, checks they hold, and returns each variant
with a `StateRef` that rebuilds it exactly.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from data.records import StateRef, ToolCall
from envs import state as st
from envs.design import Variant
from envs.world import RULE_RE, World


def design_states(world: World, seed: int, scale: int, n: int,
                  kinds: list[str] | None = None) -> list[tuple[Variant, StateRef]]:
    """`n` boundary-adjacent variants of the world's base state for `seed` (drawn from
    `kinds` in that order when given: the hook must take a `kinds` argument)."""
    rng = random.Random(seed)
    base = world.build_state(seed, scale)
    out: list[tuple[Variant, StateRef]] = []
    drawn = world.design.variants(base, rng, n) if kinds is None else world.design.variants(base, rng, n, kinds=kinds)
    for variant in drawn:
        try:
            ref = world.state_ref(seed, scale, variant.patches)
        except sqlite3.DatabaseError:
            continue  # a patch that breaks a constraint is not a valid initial state
        out.append((variant, ref))
    base.close()
    return out


def _focus_values(focus: dict[str, Any]) -> set[str]:
    values: set[str] = set()
    for v in focus.values():
        for item in v if isinstance(v, list) else [v]:
            if isinstance(item, str) and item:
                values.add(item)
    return values


def distractors(conn: sqlite3.Connection, variant: Variant, changes: list[st.CellChange],
                limit: int = 8) -> list[str]:
    """Records similar to the task's (same table as a changed row, sharing a focus value such as
    the user id) that the target leaves untouched, as "table:key". Exact-state verification
    already fails any trajectory that touches them; the list says which ones a careless agent
    might pick."""
    wanted = _focus_values(variant.focus)
    changed = {(c.table, c.key) for c in changes}
    out: list[str] = []
    for table in sorted({c.table for c in changes}):
        pk = st.primary_key(conn, table)
        cur = conn.execute(f'SELECT * FROM "{table}"')
        cols = [d[0] for d in cur.description]
        for row in cur.fetchall():
            record = dict(zip(cols, row, strict=True))
            key = json.dumps([record[c] for c in pk], separators=(",", ":"))  # as canonical_dump keys
            if (table, key) in changed or not wanted & {str(v) for v in row if v is not None}:
                continue
            out.append(f"{table}:{key}")
            if len(out) >= limit:
                return out
    return out


# ----------------------------------------------------------------- substitutes and noise
#
# Substitutes are near-copies of the task's focus records (same table, a new key, one value
# one step away: a day later, an hour later, another option of the same column); noise rows
# are near-copies of records unrelated to the task. Both are INSERT patches run through the
# world's own SQL, so CHECKs, foreign keys and BEFORE triggers apply: a rejected insert is
# skipped, and so is one whose triggers write any other row (the state may differ from the
# designed one only by the added rows). Generic over worlds: no world hook is needed.

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}(?::\d{2})?)$")
_TIME = re.compile(r"^\d{2}:\d{2}$")
_DIGITS = re.compile(r"\d+")
_ISO_IN_KEY = re.compile(r"\d{4}-\d{2}-\d{2}")
_UNIQUE = re.compile(r"UNIQUE constraint failed: ([\w.]+)")
MAX_ENUM = 12  # a text column with at most this many distinct values is an option set


@dataclass
class AddedRow:
    """One row the Set Designer inserted: a substitute of a focus record, or noise."""

    role: str  # "substitute" | "noise"
    table: str
    key: str  # canonical key, as `state.canonical_dump` writes it
    of: str  # the record it was copied from, "table:key"
    changed: dict[str, list[Any]]  # column -> [source value, new value] (besides the key)
    patch: str  # the INSERT statement
    key_map: tuple[Any, Any]  # (source primary-key value, new primary-key value)

    @property
    def record(self) -> str:
        return f"{self.table}:{self.key}"

    def as_dict(self) -> dict[str, Any]:
        return {"record": self.record, "of": self.of, "changed": self.changed}


def focus_values(focus: Any) -> set[str]:
    """Every non-empty string anywhere in a variant's focus (ids, emails, phone numbers)."""
    if isinstance(focus, str):
        return {focus} if focus else set()
    if isinstance(focus, dict):
        focus = list(focus.values())
    if isinstance(focus, list | tuple | set):
        return set().union(*(focus_values(v) for v in focus)) if focus else set()
    return set()


def _sql_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, bytes):
        return "X'" + value.hex() + "'"
    return "'" + str(value).replace("'", "''") + "'"


def _insert_sql(table: str, row: dict[str, Any]) -> str:
    cols = ", ".join(f'"{c}"' for c in row)
    vals = ", ".join(_sql_literal(v) for v in row.values())
    return f'INSERT INTO "{table}" ({cols}) VALUES ({vals})'


def _canon_key(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str:
    return json.dumps([row[c] for c in st.primary_key(conn, table)], separators=(",", ":"))


def _eligible_tables(conn: sqlite3.Connection) -> dict[str, str]:
    """Tables a row can be near-copied in: a single-column primary key and more than two
    columns (key/value settings tables such as `meta` are left alone). -> table: pk column."""
    out: dict[str, str] = {}
    for table in st.tables(conn):
        info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
        pk = [r[1] for r in info if r[5] > 0]
        if len(pk) == 1 and len(info) > 2:
            out[table] = pk[0]
    return out


def _key_used(conn: sqlite3.Connection, table: str, pk: str, value: Any) -> bool:
    return conn.execute(f'SELECT 1 FROM "{table}" WHERE "{pk}" = ?', (value,)).fetchone() is not None


def _bump(text: str, skip_dates: bool = True) -> list[str]:
    """Variants of `text` with one run of digits counted up (width kept), first run first;
    runs inside an ISO date are skipped (a key's date stays its date)."""
    dates = [m.span() for m in _ISO_IN_KEY.finditer(text)] if skip_dates else []
    out: list[str] = []
    for m in _DIGITS.finditer(text):
        if any(a <= m.start() < b for a, b in dates):
            continue
        width, n = len(m.group()), int(m.group())
        out += [text[:m.start()] + str(n + k).zfill(width) + text[m.end():] for k in range(1, 60)]
    return out + [f"{text}_{k}" for k in range(2, 12)]


def _new_key(conn: sqlite3.Connection, table: str, pk: str, old: Any, changed: dict[str, list[Any]]) -> Any:
    """An unused primary key for a copy of the row keyed `old`: an integer key counts up; a
    text key takes the step the row took when it holds the changed value (a flight id with
    its date), else counts up one of its digit runs."""
    if isinstance(old, int):
        (top,) = conn.execute(f'SELECT MAX("{pk}") FROM "{table}"').fetchone()
        return int(top or 0) + 1
    if not isinstance(old, str):
        return None
    tries: list[str] = []
    for before, after in changed.values():
        if isinstance(before, str) and isinstance(after, str) and before and before in old:
            tries.append(old.replace(before, after))
    for key in [*tries, *_bump(old)]:
        if not _key_used(conn, table, pk, key):
            return key
    return None


def _fk_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[3] for r in conn.execute(f'PRAGMA foreign_key_list("{table}")').fetchall()}


def _steps(conn: sqlite3.Connection, table: str, row: dict[str, Any], pk: str,
           rng: random.Random) -> list[dict[str, list[Any]]]:
    """Candidate one-step changes of a row, most recognisable first: dates and times move
    (every date of the row by the same day, so it stays coherent), then an option column
    takes another of its values, then a number moves by one step. Keys and references are
    never changed. Each candidate: column -> [before, after]."""
    fks = _fk_columns(conn, table)
    free = {c: v for c, v in row.items() if c != pk and c not in fks and v is not None}
    dated = {c: v for c, v in free.items() if isinstance(v, str) and (_DATE.match(v) or _DATETIME.match(v))}
    groups: list[list[dict[str, list[Any]]]] = [[], [], [], []]
    (n_rows,) = conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
    for days in (1, -1):
        step: dict[str, list[Any]] = {}
        for c, v in dated.items():
            if _DATE.match(v):
                step[c] = [v, (date.fromisoformat(v) + timedelta(days=days)).isoformat()]
            else:
                d, t = _DATETIME.match(v).groups()  # type: ignore[union-attr]
                shifted = (date.fromisoformat(d) + timedelta(days=days)).isoformat()
                step[c] = [v, f"{shifted} {t}" if " " in v else f"{shifted}T{t}"]
        if step:
            groups[0].append(step)
    for c, v in free.items():
        if isinstance(v, str) and _TIME.match(v):
            h, m = int(v[:2]), v[3:]
            groups[1].append({c: [v, f"{(h + 1) % 24:02d}:{m}"]})
        elif isinstance(v, str) and c not in dated:
            values = [r[0] for r in conn.execute(
                f'SELECT DISTINCT "{c}" FROM "{table}" WHERE "{c}" IS NOT NULL LIMIT {MAX_ENUM + 1}')]
            others = sorted({x for x in values if x != v and isinstance(x, str)})
            # an option set: few values, shared by several rows (unique names are not options)
            if others and len(values) <= MAX_ENUM and len(values) < n_rows:
                groups[2].append({c: [v, rng.choice(others)]})
        elif isinstance(v, int | float) and not isinstance(v, bool):
            values = {r[0] for r in conn.execute(f'SELECT DISTINCT "{c}" FROM "{table}" LIMIT 3')}
            if values <= {0, 1}:
                continue  # a flag, not a quantity
            size = max(1, 10 ** (len(str(int(abs(v)))) - 2))
            groups[3].append({c: [v, v + size]})
    out: list[dict[str, list[Any]]] = []
    for g in groups:
        rng.shuffle(g)
        out += g
    return out


def _insert_alone(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> tuple[str | None, str]:
    """Insert `row`; keep it only if it succeeds and writes no other row. -> (patch, reason)."""
    for _ in range(4):
        sql = _insert_sql(table, row)
        conn.execute("SAVEPOINT set_designer_row")
        before = conn.total_changes
        try:
            conn.execute(sql)
        except sqlite3.DatabaseError as exc:
            conn.execute("ROLLBACK TO set_designer_row")
            conn.execute("RELEASE set_designer_row")
            unique = _UNIQUE.search(str(exc))  # one column only: "UNIQUE constraint failed: t.c"
            col = unique.group(1).split(".")[-1] if unique and "," not in str(exc) else ""
            pk_fk = set(st.primary_key(conn, table)) | _fk_columns(conn, table)
            if col in row and col not in pk_fk and isinstance(row[col], str):  # a name or email: count up
                free = next((b for b in _bump(row[col], skip_dates=False)
                             if not _key_used(conn, table, col, b)), None)
                if free is not None:
                    row = {**row, col: free}
                    continue
            rule = RULE_RE.search(str(exc))
            return None, f"rejected:{rule.group(1) if rule else 'constraint'}"
        if conn.total_changes - before != 1:  # a trigger wrote elsewhere (seats, balances)
            conn.execute("ROLLBACK TO set_designer_row")
            conn.execute("RELEASE set_designer_row")
            return None, "side_effects"
        conn.execute("RELEASE set_designer_row")
        return sql, ""
    return None, "rejected:unique"


def _near_copy(conn: sqlite3.Connection, role: str, table: str, pk: str, row: dict[str, Any],
               rng: random.Random, skipped: Counter, columns: list[str] | None = None) -> AddedRow | None:
    """Insert a copy of `row` with a new key and one step changed; None if every step fails."""
    steps = _steps(conn, table, row, pk, rng)
    if columns is not None:
        steps = [s for s in steps if set(s) <= set(columns)]
    if not steps:
        skipped[f"{role}:no_step"] += 1
        return None
    for step in steps:
        new_key = _new_key(conn, table, pk, row[pk], step)
        if new_key is None:
            skipped[f"{role}:no_key"] += 1
            continue
        copy = {**row, **{c: after for c, (_, after) in step.items()}, pk: new_key}
        patch, reason = _insert_alone(conn, table, copy)
        if patch is None:
            skipped[f"{role}:{reason}"] += 1
            continue
        stored = dict(zip(row, conn.execute(f'SELECT * FROM "{table}" WHERE "{pk}" = ?', (new_key,)).fetchone(),
                          strict=True))
        changed = {c: [row[c], stored[c]] for c in row if c != pk and row[c] != stored[c]}
        return AddedRow(role, table, _canon_key(conn, table, stored), f"{table}:{_canon_key(conn, table, row)}",
                        changed, patch, (row[pk], new_key))
    return None


def _row(conn: sqlite3.Connection, table: str, where: str, args: tuple[Any, ...]) -> dict[str, Any] | None:
    cur = conn.execute(f'SELECT * FROM "{table}" WHERE {where}', args)
    found = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], found, strict=True)) if found else None


def focus_records(conn: sqlite3.Connection, focus: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(table, pk column, row) of every record whose primary key is a focus value."""
    wanted = sorted(focus_values(focus))
    out: list[tuple[str, str, dict[str, Any]]] = []
    for table, pk in _eligible_tables(conn).items():
        for value in wanted:
            row = _row(conn, table, f'"{pk}" = ?', (value,))
            if row is not None:
                out.append((table, pk, row))
    return out


def grow_haystack(conn: sqlite3.Connection, focus: dict[str, Any], rng: random.Random, substitutes: int = 0,
                  noise_rows: int = 0, columns: list[str] | None = None) -> tuple[list[AddedRow], Counter]:
    """Insert up to `substitutes` near-copies of focus records and `noise_rows` near-copies
    of unrelated records into `conn`. Returns the rows added (in patch order) and the
    counted reasons for inserts that were skipped. `columns` restricts which columns a
    substitute may change (tests use it to force a look-alike)."""
    if substitutes < 0 or noise_rows < 0:
        raise ValueError("substitutes and noise_rows must be >= 0")
    added: list[AddedRow] = []
    skipped: Counter = Counter()
    records = focus_records(conn, focus) if substitutes else []
    rng.shuffle(records)
    attempts = 0
    while records and sum(a.role == "substitute" for a in added) < substitutes and attempts < 4 * substitutes:
        table, pk, row = records[attempts % len(records)]
        attempts += 1
        got = _near_copy(conn, "substitute", table, pk, row, rng, skipped, columns)
        if got is not None:
            added.append(got)
    wanted = focus_values(focus) | {str(a.key_map[1]) for a in added}
    tables = {t: pk for t, pk in _eligible_tables(conn).items()
              if conn.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()}
    names = sorted(tables)
    attempts = 0
    while names and sum(a.role == "noise" for a in added) < noise_rows and attempts < 6 * noise_rows:
        attempts += 1
        table = rng.choice(names)
        (count,) = conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
        row = _row(conn, table, f'1 ORDER BY "{tables[table]}" LIMIT 1 OFFSET ?', (rng.randrange(count),))
        if row is None or wanted & {str(v) for v in row.values() if v is not None}:
            skipped["noise:related"] += 1  # shares a value with the task: not unrelated
            continue
        got = _near_copy(conn, "noise", table, tables[table], row, rng, skipped)
        if got is not None:
            added.append(got)
            wanted.add(str(got.key_map[1]))
    return added, skipped


def with_haystack(world: World, variant: Variant, ref: StateRef, rng: random.Random, substitutes: int = 0,
                  noise_rows: int = 0, columns: list[str] | None = None
                  ) -> tuple[StateRef, list[AddedRow], Counter]:
    """`ref` with substitutes and noise added as patches after the variant's own."""
    if not substitutes and not noise_rows:
        return ref, [], Counter()
    conn = world.build_state(ref.seed, ref.scale, ref.patches)
    try:
        added, skipped = grow_haystack(conn, variant.focus, rng, substitutes, noise_rows, columns)
    finally:
        conn.close()
    if not added:
        return ref, [], skipped
    return world.state_ref(ref.seed, ref.scale, [*ref.patches, *(a.patch for a in added)]), added, skipped


def _swap(value: Any, a: Any, b: Any, id_arg: bool) -> Any:
    if isinstance(value, dict):
        return {k: _swap(v, a, b, id_arg or k.lower().endswith("id")) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap(v, a, b, id_arg) for v in value]
    if isinstance(value, bool) or (isinstance(a, int) and not id_arg):
        return value  # an integer key is swapped only in an id argument, never in a count
    return b if value == a else a if value == b else value


def path_uses(path: list[ToolCall], row: AddedRow) -> bool:
    """Whether any argument of `path` names the added row's key."""
    marker = object()
    return any(_swap(c.arguments, row.key_map[1], marker, False) != c.arguments for c in path)


def swapped_path(path: list[ToolCall], row: AddedRow) -> list[ToolCall]:
    """`path` with the added row's key and its source's key exchanged in every argument."""
    a, b = row.key_map
    return [ToolCall(name=c.name, arguments=_swap(c.arguments, a, b, False)) for c in path]


def ambiguous_rows(world: World, ref: StateRef, path: list[ToolCall], instruction: str, variant: Variant,
                   rows: list[AddedRow]) -> list[AddedRow]:
    """Added rows that make `instruction` ambiguous: acting on the row instead of its source
    (or the reverse) succeeds, reaches another state, and the world states that state's goal
    with the same words (in any order), so the user could not tell the two apart."""
    target: str | None = None
    out: list[AddedRow] = []
    for row in rows:
        alt = swapped_path(path, row)
        if alt == path:
            continue
        if target is None:
            target = _run(world, ref, path)[0]
        alt_hash, before, after = _run(world, ref, alt, keep=True)
        try:
            if alt_hash is None or alt_hash == target or before is None or after is None:
                continue
            changes = st.diff_states(before, after)
            goal = world.design.describe(changes, before, after, variant)
            if goal is not None and _same_words(goal.instruction, instruction):
                out.append(row)
        finally:
            for conn in (before, after):
                if conn is not None:
                    conn.close()
    return out


def _same_words(a: str, b: str) -> bool:
    """The same words, in any order: clauses of a compound goal may be listed either way."""
    return a == b or sorted(re.findall(r"\S+", a.rstrip("."))) == sorted(re.findall(r"\S+", b.rstrip(".")))


def _run(world: World, ref: StateRef, path: list[ToolCall], keep: bool = False
         ) -> tuple[str | None, sqlite3.Connection | None, sqlite3.Connection | None]:
    """(hash reached, before, after) replaying `path` on `ref`; hash None if a write failed."""
    env = world.env(ref)
    before = world.build_state(ref.seed, ref.scale, ref.patches) if keep else None
    for call in path:
        obs = env.call(call)
        if not obs.ok and world.tools[call.name].write:
            env.close()
            if before is not None:
                before.close()
            return None, None, None
    h = env.state_hash()
    if not keep:
        env.close()
        return h, None, None
    return h, before, env.conn
