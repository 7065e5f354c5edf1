"""The world kit's SQL helpers: what every world's tools, design hooks and constraint hooks
share, so a world folder holds only its domain logic.

- rows and records: `rows`, `row` (None when absent), `lookup` (a table's row by its key),
  `one` (LookupError when absent),
  `need` (a tool's NOT_FOUND error when absent), `count`; `set_new` (a tool's change of one
  field, NO_CHANGE when it has that value already);
- SQL text: `q` quotes a value as an SQL literal (for Set Designer patches);
- time: every world keeps its clock in `meta.now` (`NOW_SQL`); `now`, `now_dt`, `today`, `ts`;
- schema text: `schema_script` reads a world's schema.sql, each line `-- include: NAME`
  replaced by `NAME.sql` of the world's folder or else of the kit (`-- include: ledger`: the
  event ledger), its `{{param}}` placeholders filled from the line's `param=value`s;
- ids: `mint_id` makes the ids a world creates from the content of the record (and how
  many records of that content exist already), so two independent writes get the same ids
  in either order and a replay reaches the same state hash whatever the order.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any

from envs.tools import ToolError

NOW_SQL = "(SELECT value FROM meta WHERE key = 'now')"
TODAY_SQL = f"date({NOW_SQL})"
INCLUDE_RE = re.compile(r"^-- include: (\w+)((?:[ \t]+\w+=(?:'(?:[^']|'')*'|\"[^\"]*\"|[^\s'\"]+))*)[ \t]*$",
                        re.MULTILINE)
_ARG_RE = re.compile(r"(\w+)=('(?:[^']|'')*'|\"[^\"]*\"|[^\s'\"]+)")
_PLACEHOLDER_RE = re.compile(r"\{\{(\w+)(?::((?:[^{}]|\{\{[^{}]*\}\})*))?\}\}")  # a default may hold {{p}}s


def _params(args: tuple[Any, ...]) -> Any:
    """Positional parameters, or one mapping of named ones (`:name` placeholders)."""
    return args[0] if len(args) == 1 and isinstance(args[0], dict) else args


def rows(db: sqlite3.Connection, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Every row of the query as a dict of column -> value (`args`: positional parameters,
    or one dict of named ones)."""
    cur = db.execute(sql, _params(args))
    cols = [d[0] for d in cur.description or []]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def row(db: sqlite3.Connection, sql: str, *args: Any) -> dict[str, Any] | None:
    """The query's first row, or None."""
    cur = db.execute(sql, _params(args))
    found = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], found, strict=True)) if found else None


def one(db: sqlite3.Connection, sql: str, *args: Any) -> dict[str, Any]:
    """The query's first row; LookupError when there is none (a bug in the caller's data)."""
    found = row(db, sql, *args)
    if found is None:
        raise LookupError(f"no row for {sql!r} {args}")
    return found


def lookup(table: str, key: str) -> Callable[[sqlite3.Connection, Any], dict[str, Any] | None]:
    """The function that reads the row of `table` whose `key` is a given value (None when
    there is none): a constraint check's record before and after."""
    sql = f'SELECT * FROM "{table}" WHERE "{key}" = ?'
    return lambda db, value: row(db, sql, value)


def need(record: dict[str, Any] | None, what: str, key: Any) -> dict[str, Any]:
    """`record`, or the tool error an agent gets for an id that does not exist."""
    if record is None:
        raise ToolError("NOT_FOUND", f"{what} {key!r} not found")
    return record


def fetch(db: sqlite3.Connection, table: str, key: str, value: Any, what: str) -> dict[str, Any]:
    """The row of `table` whose `key` is `value`, or the NOT_FOUND tool error naming it as
    `what` (a tool's lookup of the record an id points at)."""
    return need(row(db, f'SELECT * FROM "{table}" WHERE "{key}" = ?', value), what, value)


def set_new(db: sqlite3.Connection, table: str, key: str, key_value: Any, column: str, value: Any,
            current: Any, unchanged: str) -> None:
    """Set `column` of the row of `table` whose `key` is `key_value` to `value`: a tool's
    change of one field, with the NO_CHANGE error (message `unchanged`) when its value now
    (`current`) is `value` already."""
    if current == value:
        raise ToolError("NO_CHANGE", unchanged)
    db.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE "{key}" = ?', (value, key_value))


def count(db: sqlite3.Connection, table: str, **where: Any) -> int:
    """How many rows of `table` have every column of `where` equal to its value."""
    clause = " AND ".join(f'"{c}" IS ?' for c in where) or "1"
    (n,) = db.execute(f'SELECT COUNT(*) FROM "{table}" WHERE {clause}', tuple(where.values())).fetchone()
    return int(n)


def q(value: Any) -> str:
    """`value` as an SQL literal: NULL, or a single-quoted string with quotes doubled."""
    return "NULL" if value is None else "'" + str(value).replace("'", "''") + "'"


def now(db: sqlite3.Connection) -> str:
    """The world's clock (`meta.now`, 'YYYY-MM-DD HH:MM:SS')."""
    (value,) = db.execute(f"SELECT {NOW_SQL}").fetchone()
    return str(value)


def now_dt(db: sqlite3.Connection) -> datetime:
    return datetime.fromisoformat(now(db))


def today(db: sqlite3.Connection) -> date:
    return date.fromisoformat(now(db)[:10])


def ts(dt: datetime) -> str:
    """A datetime in the form the worlds store: 'YYYY-MM-DD HH:MM:SS'."""
    return dt.strftime("%Y-%m-%d %H:%M:%S")


def mint_id(prefix: str, content: dict[str, Any], n: int = 0, length: int = 6, digits: bool = False) -> str:
    """A new id for a record from what identifies it (`content`, column -> value) and `n`,
    the number of records of that same content that exist already (`count` gives it for
    content held in one table's columns). The id then depends on what the record is, not
    on how many other records were written before it: independent writes in any order
    mint the same ids, and doing the same thing twice (book, cancel, book again) mints two.

    `digits=True` gives a seven-digit number after the prefix (order numbers).
    """
    body = "|".join([prefix, *(f"{k}={content[k]}" for k in sorted(content)), str(n)])
    h = hashlib.sha256(body.encode()).hexdigest()
    return prefix + (f"{int(h[:12], 16) % 9_000_000 + 1_000_000}" if digits else h[:length].upper())


def include_args(text: str) -> dict[str, str]:
    """An include line's `param=value`s as SQL text: a bare token as it is, `'...'` as the SQL
    string literal it is (quotes kept), `"..."` as the text between the double quotes."""
    return {k: v[1:-1] if v.startswith('"') else v for k, v in _ARG_RE.findall(text)}


def fill(template: str, args: dict[str, str], name: str = "include") -> str:
    """`template` with each `{{param}}` (or `{{param:default}}`, a default that may hold
    placeholders of its own) replaced by `args[param]` (ValueError for a parameter without
    value or default, and for an argument it has no placeholder for)."""
    used = {p for found in _PLACEHOLDER_RE.findall(template)
            for p in (found[0], *(q for q, _ in _PLACEHOLDER_RE.findall(found[1])))}
    unknown = set(args) - used
    if unknown:
        raise ValueError(f"{name}: no parameter {', '.join(sorted(unknown))}")

    def value(m: re.Match[str]) -> str:
        if m[1] in args:
            return args[m[1]]
        if m[2] is None:
            raise ValueError(f"{name}: parameter {m[1]!r} has no value")
        return _PLACEHOLDER_RE.sub(value, m[2])

    return _PLACEHOLDER_RE.sub(value, template)


def schema_script(path: Path) -> str:
    """The schema script at `path` with each line `-- include: NAME param=value ...`
    replaced by `NAME.sql` of the script's folder, or else of the kit (`envs/NAME.sql`),
    its placeholders filled (`fill`, `include_args`); FileNotFoundError for a name neither
    has."""
    kit = Path(__file__).parent

    def expand(m: re.Match[str]) -> str:
        local = path.parent / f"{m[1]}.sql"
        source = local if local.name != path.name and local.exists() else kit / f"{m[1]}.sql"
        return fill(source.read_text().rstrip("\n"), include_args(m[2]), f"-- include: {m[1]}")

    return INCLUDE_RE.sub(expand, path.read_text())
