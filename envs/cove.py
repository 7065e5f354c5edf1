"""Helpers the worlds' ``constraints.py`` modules share (CoVe, methods.md §2; the hooks are
described in `envs/constraints.py`).

- entity records as plain dicts and `match` (which records a description's attributes fit),
  so a world's ``matching_ids`` is one line and uniqueness is checked the same way everywhere;
- `unique_ref`: the first description on a ladder of growing attribute sets that matches
  exactly its record (`FuzzifyError` when even the most specific one is ambiguous);
- `sample_set`: the sampling loop of a world's ``sample_constraints`` (one request, maybe a
  second on other records, solvable in every write order); `constraint_sampler` makes a
  world's whole ``sample_constraints`` (its owners, `sample_set`, or `sample_dependent` for a
  dependent kind);
- `trial`: whether a list of calls all succeed on a connection, run inside a savepoint that
  is rolled back (sampling checks a set is solvable in every write order with it, and the
  audit keeps only mutants whose writes all succeed);
- `Audit`: the loop of a world's ``audit_mutations`` (each constraint's reference write, a
  `swap` that changes its arguments, `offer` that keeps a variant whose writes succeed);
- dependent requests (`ON_NEW`, `applied`, `created_id`, `target`): a constraint about the
  record an earlier constraint's write creates ("book a flight, then add bags to that
  booking"). Its id field holds the id the reference's write will mint, found by running
  that write inside a rolled-back savepoint; its ``on_new`` field names the creating
  constraint, and the check resolves the record from that constraint's outcome, so an agent
  that creates the record some other valid way is judged on the record it made. A constraint
  with an ``after`` field is possible only once the named constraint's write is made (a
  booking the unpaid balance blocks until it is paid): its set is sampled in that order.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from itertools import permutations
from typing import Any

from data.records import ToolCall
from envs import sql as kit
from envs.constraints import Constraint, Fuzzification, FuzzifyError, FuzzyRef
from envs.design import Goal

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_IDENT = re.compile(r"^[a-z_]+$")
PARTS_OF_DAY = [("11:00", "morning"), ("15:00", "midday"), ("18:00", "afternoon")]  # before -> word; else evening




def date_words(iso: str) -> str:
    """'2026-05-12' -> 'May 12'."""
    _, month, day = iso[:10].split("-")
    return f"{MONTHS[int(month) - 1]} {int(day)}"


def month_words(period: str) -> str:
    """'2026-04' -> 'April 2026'."""
    year, month = period.split("-")[:2]
    return f"{MONTHS[int(month) - 1]} {year}"


def part_of_day(hhmm: str) -> str:
    """"morning" (before 11:00), "midday" (before 15:00), "afternoon" (before 18:00) or "evening"."""
    return next((word for limit, word in PARTS_OF_DAY if hhmm < limit), "evening")


EntityViews = dict[str, Callable[[sqlite3.Connection], list[dict[str, Any]]]]
Field = str | tuple[str, str | Callable[[dict[str, Any]], Any]]


def view(sql: str, id_column: str, *fields: Field) -> Callable[[sqlite3.Connection], list[dict[str, Any]]]:
    """An entity view: each row of `sql` as a record with its `id` (from `id_column`) and, in
    order, each field: a column by its own name, or ``(attribute, column or function of the row)``."""
    def records(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        out = []
        for r in kit.rows(conn, sql):
            rec = {"id": r[id_column]}
            for f in fields:
                name, source = (f, f) if isinstance(f, str) else f
                rec[name] = source(r) if callable(source) else r[source]
            out.append(rec)
        return out
    return records


def worded(text: str, where: dict[str, Any], **clauses: str | Callable[[Any], str]) -> str:
    """`text`, then the clause of each attribute `where` has, in the order given: a format
    string of its value (``" on the {} plan"``) or a function of it."""
    for attr, clause in clauses.items():
        if attr in where:
            text += clause(where[attr]) if callable(clause) else clause.format(where[attr])
    return text


def matching_ids_in(entities: EntityViews, conn: sqlite3.Connection, entity: str,
                    where: dict[str, Any]) -> list[str]:
    """Ids of the `entity` records (one of a world's entity views) that fit `where`."""
    if entity not in entities:
        raise ValueError(f"unknown entity {entity!r}; known: {sorted(entities)}")
    return match(entities[entity](conn), where)


def one(entities: EntityViews, conn: sqlite3.Connection, entity: str, record_id: str) -> dict[str, Any]:
    """The `entity` record with id `record_id` (KeyError when absent)."""
    found = [r for r in entities[entity](conn) if r["id"] == record_id]
    if not found:
        raise KeyError(f"{entity} {record_id!r} not found")
    return found[0]


def match(records: Iterable[dict[str, Any]], where: dict[str, Any]) -> list[str]:
    """Sorted ids of the records whose attributes equal every value in `where`."""
    return sorted(str(r["id"]) for r in records if all(k in r and r[k] == v for k, v in where.items()))


def cumulative(scope: dict[str, Any], record: dict[str, Any], order: list[str]) -> list[dict[str, Any]]:
    """[scope + order[0], scope + order[:2], ...]: a ladder of ever more specific descriptions."""
    ladder, where = [], dict(scope)
    for column in order:
        where = {**where, column: record[column]}
        ladder.append(where)
    return ladder


def unique_ref(slot: str, entity: str, record_id: str, ladder: list[dict[str, Any]],
               text: Callable[[dict[str, Any]], str], matching: Callable[[dict[str, Any]], list[str]]) -> FuzzyRef:
    """The first description on `ladder` that matches only `record_id` (per `matching`)."""
    first = 0
    ids: list[str] = []
    for level, where in enumerate(ladder):
        ids = matching(where)
        if record_id not in ids:
            raise ValueError(f"description {where} does not match its own {entity} {record_id!r}")
        first = first or len(ids)
        if len(ids) == 1:
            return FuzzyRef(slot=slot, entity=entity, record_id=record_id, text=text(where), where=where,
                            level=level, first_matches=first)
    raise FuzzifyError(entity, record_id, len(ids))


def described(entities: EntityViews, conn: sqlite3.Connection, slot: str, entity: str, record_id: str,
              among: str | dict[str, Any], order: list[str], text: Callable[[dict[str, Any]], str]) -> FuzzyRef:
    """`unique_ref` of the `entity` record `record_id` on the ladder of `order`'s attributes
    (`cumulative`), among the records that share its `among` column (its owner), or that
    have the `among` attributes."""
    rec = one(entities, conn, entity, record_id)
    scope = {among: rec[among]} if isinstance(among, str) else among
    return unique_ref(slot, entity, record_id, cumulative(scope, rec, order), text,
                      lambda where: matching_ids_in(entities, conn, entity, where))


def new_ids(conn_initial: sqlite3.Connection, conn_final: sqlite3.Connection, table: str, key: str,
            where: dict[str, Any]) -> list[str]:
    """Ids (`key`) of the rows of `table` that match `where` now and did not exist initially."""
    before = {r[0] for r in conn_initial.execute(f"SELECT {key} FROM {table}")}
    cond = " AND ".join(f"{k} IS ?" for k in where)
    found = conn_final.execute(f"SELECT {key} FROM {table} WHERE {cond} ORDER BY {key}", tuple(where.values()))
    return [r[0] for r in found if r[0] not in before]


Calls = dict[str, tuple[str, ...] | Callable[[Constraint], ToolCall]]  # kind -> (tool, its arguments...) or a call maker


def call_of(c: Constraint, writes: Calls) -> ToolCall:
    """The write of `c` by the table `writes` (kind -> (tool, its arguments...)): each argument
    is the constraint's field of the same name; a kind whose write is not that simple maps
    to the function that makes it."""
    if c.kind not in writes:
        raise ValueError(f"unknown constraint kind {c.kind!r}")
    spec = writes[c.kind]
    if callable(spec):
        return spec(c)
    tool, *names = spec
    return ToolCall(name=tool, arguments={n: c[n] for n in names})


def reference_calls(constraints: list[Any], first: list[ToolCall], reads: Callable[[Any], list[ToolCall]],
                    write_call: Callable[[Any], ToolCall]) -> list[ToolCall]:
    """A world's reference solution: the reads it makes `first` (the owner's account), the
    reads each constraint needs (`reads(c)`, in order), then one write per constraint."""
    return [*first, *(call for c in constraints for call in reads(c)), *(write_call(c) for c in constraints)]


Describe = Callable[[str, Any], FuzzyRef]  # (slot "c<i>.<field>", the field's value) -> its description


def fuzzification(constraints: list[Any], fields: Callable[[Any], dict[str, Describe] | None]) -> Fuzzification:
    """A world's ``fuzzify``: each field of `fields(c)` (in its order) described under the slot
    "c<i>.<field>" of the i-th constraint; `fields(c)` is None for a kind it does not know
    (ValueError). A describer raises `FuzzifyError` when no description is unique."""
    out = Fuzzification()
    for i, c in enumerate(constraints):
        found = fields(c)
        if found is None:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
        for name, describe in found.items():
            out.refs[f"c{i}.{name}"] = describe(f"c{i}.{name}", c[name])
    return out


def trial(conn: sqlite3.Connection, world: str, calls: list[ToolCall]) -> bool:
    """Whether every call succeeds when run in order on `conn`; the state is left unchanged."""
    with applied(conn, world, calls) as ok:
        return ok


class Audit:
    """The known-bad variants of a reference (a world's ``audit_mutations``): `offer` keeps
    the first variant of each name whose writes all succeed (`trial`); `out` holds them."""

    def __init__(self, conn: sqlite3.Connection, world: str, reference: list[ToolCall]) -> None:
        self.conn, self.world, self.reference = conn, world, reference
        self.out: dict[str, list[ToolCall]] = {}

    def offer(self, name: str, calls: list[ToolCall]) -> None:
        if name not in self.out and trial(self.conn, self.world, calls):
            self.out[name] = calls

    def writes(self, constraints: list[Any], write_call: Callable[[Any], ToolCall]
               ) -> Iterator[tuple[Any, Callable[..., list[ToolCall]]]]:
        """(constraint, swap) for each constraint whose write the reference makes: `swap(**changes)`
        is the reference with that write's arguments changed."""
        for c in constraints:
            old = next((call for call in self.reference if call.key() == write_call(c).key()), None)
            if old is not None:
                yield c, functools.partial(self._swap, old)

    def _swap(self, old: ToolCall, **changes: Any) -> list[ToolCall]:
        new = ToolCall(name=old.name, arguments={**old.arguments, **changes})
        return [new if call is old else call for call in self.reference]


ON_NEW = "on_new"  # field of a dependent constraint: the index of the constraint that creates its record
AFTER = "after"  # field of a constraint only possible once the write of the constraint it names is made


@contextlib.contextmanager
def applied(conn: sqlite3.Connection, world: str, calls: list[ToolCall]) -> Iterator[bool]:
    """Run `calls` on `conn` inside a savepoint, yield whether they all succeeded, then roll
    the state back (sampling a request about a record a write is yet to create)."""
    from envs.registry import get_world
    from envs.world import Env

    env = Env(get_world(world), conn)
    conn.execute("SAVEPOINT cove_applied")
    try:
        yield all(env.call(c).ok for c in calls)
    finally:
        conn.execute("ROLLBACK TO cove_applied")
        conn.execute("RELEASE cove_applied")


def created_id(conn: sqlite3.Connection, world: str, calls: list[ToolCall], table: str, column: str) -> str | None:
    """The one id of `table` that running `calls` on `conn` adds (the state is left as it
    was); None when they fail or add no row, or add more than one."""
    if not _IDENT.match(table) or not _IDENT.match(column):
        raise ValueError(f"bad table or column name: {table}.{column}")
    query = f"SELECT {column} FROM {table}"
    before = {r[0] for r in conn.execute(query)}
    with applied(conn, world, calls) as ok:
        new = sorted({r[0] for r in conn.execute(query)} - before) if ok else []
    return new[0] if len(new) == 1 else None


def target(c: Any, field: str, records: list[Any]) -> Any:
    """The id a constraint is about: its `field`, or for a dependent one (``on_new``) the
    record its creating constraint was satisfied by in `records` (one per earlier
    constraint, None where unsatisfied)."""
    if ON_NEW in c.fields:
        index = c.fields[ON_NEW]
        return records[index] if index < len(records) else None
    return c.fields[field]


def sample_dependent(rng: Any, owners: list[Any], sample: Callable[[Any], list[Any]]) -> list[Any]:
    """A set of requests that depend on each other (a dependent kind): the first non-empty
    `sample(owner)` over the first 40 `owners` in a shuffled order; empty when none fits."""
    owners = list(owners)
    rng.shuffle(owners)
    for owner in owners[:40]:
        found = sample(owner)
        if found:
            return found
    return []


def solvable_in_any_order(conn: sqlite3.Connection, world: str, reads: list[ToolCall],
                          writes: list[ToolCall]) -> bool:
    """Every order of `writes` (after `reads`) succeeds: a set whose writes interact (one
    enables or blocks another) is not sampled, so the verifier may accept any order."""
    return all(trial(conn, world, [*reads, *order]) for order in permutations(writes))


def sample_set(conn: sqlite3.Connection, rng: Any, world: str, owners: list[Any], kinds: list[str],
               sample: Callable[[str, sqlite3.Connection, Any, Any, set[str]], Any],
               touched: Callable[[Any], set[str]], write_call: Callable[[Any], ToolCall],
               p_extra: float, first: str | None = None) -> list[Any]:
    """A constraint set for one owner (user, customer, patient), solvable by construction:
    one request of some kind, plus (with probability `p_extra`) a second one on records the
    first does not touch, kept only if every write order succeeds. Kinds are tried from a
    random first one (`first`, when given), owners in a shuffled order (the first 40); empty
    when nothing fits.
    `sample(kind, conn, rng, owner, avoid)` draws one constraint or None."""
    owners = list(owners)
    rng.shuffle(owners)
    first_kind = rng.choice(kinds)  # drawn either way: the stream stays the same
    if first is not None:
        if first not in kinds:
            raise ValueError(f"unknown kind {first!r}; kinds are {kinds}")
        first_kind = first
    extra = rng.random() < p_extra

    def solvable(cs: list[Any]) -> bool:
        return solvable_in_any_order(conn, world, [], [write_call(c) for c in cs])

    for kind in [first_kind, *[k for k in kinds if k != first_kind]]:
        for owner in owners[:40]:
            c0 = sample(kind, conn, rng, owner, set())
            if c0 is None:
                continue
            out = [c0]
            if extra:
                for k2 in rng.sample(kinds, len(kinds)):
                    c1 = sample(k2, conn, rng, owner, touched(c0))
                    if c1 is not None:
                        out.append(c1)
                        break
            if len(out) == 2 and not solvable(out):
                out = [c0]
            if solvable(out):
                return out
    return []



def constraint_sampler(world: str, owners: Callable[[sqlite3.Connection], list[Any]], kinds: list[str],
                       dependent: Iterable[str], on_dependent: Callable[..., list[Any]],
                       sample: Callable[[str, sqlite3.Connection, Any, Any, set[str]], Any],
                       touched: Callable[[Any], set[str]], write_call: Callable[[Any], ToolCall],
                       p_extra: float = 0.5, owner: str = "owner", other: str = "another record"
                       ) -> Callable[..., list[Any]]:
    """A world's ``sample_constraints(conn, rng, p_extra, kind)``: a set for one of
    `owners(conn)`; for a kind in `dependent`, the first non-empty `on_dependent(conn, rng,
    owner, kind)` whose writes succeed in its order (`sample_dependent`, `trial`), for any
    other, `sample_set` over `kinds` (starting with `kind` when given). Its docstring names
    the `owner` and what the second request is on (`other`)."""
    dependent = list(dependent)

    def in_order(found: list[Any], conn: sqlite3.Connection) -> list[Any]:
        return found if found and trial(conn, world, [write_call(c) for c in found]) else []

    def sample_constraints(conn: sqlite3.Connection, rng: Any, p_extra: float = p_extra,
                           kind: str | None = None) -> list[Any]:
        found = owners(conn)
        if kind in dependent:
            return sample_dependent(rng, found, lambda who: in_order(on_dependent(conn, rng, who, kind), conn))
        return sample_set(conn, rng, world, found, kinds, sample, touched, write_call, p_extra, first=kind)

    sample_constraints.__doc__ = (
        f"A constraint set for one {owner}, solvable by construction (its writes succeed in every order, "
        f"or for a dependent kind in its own order): one request (of `kind` when given), plus (with "
        f"probability `p_extra`) a second one on {other}. Empty when nothing fits.")
    return sample_constraints

class KnownInfo(dict):  # type: ignore[type-arg]
    """known_info for the i-th constraint of a set: a key an earlier constraint already
    used gets the suffix " (request i+1)", so two requests never overwrite each other."""

    def __init__(self, base: dict[str, str], index: int = 0) -> None:
        super().__init__(base)
        self.index = index

    def requests(self, constraints: list[Any], fuzzy: dict[str, str]) -> Iterator[tuple[int, Any, dict[str, str]]]:
        """A ``goal``'s loop over a set: each constraint's index (which this known info then
        counts as its request), the constraint and its descriptions by field (the "c<i>.<field>"
        keys of `fuzzy`)."""
        for i, c in enumerate(constraints):
            self.index = i
            yield i, c, {k.split(".", 1)[1]: v for k, v in fuzzy.items() if k.startswith(f"c{i}.")}

    def update(self, other: dict[str, str] | None = None, **kw: str) -> None:  # type: ignore[override]
        for key, value in {**(other or {}), **kw}.items():
            self[key] = value

    def __setitem__(self, key: str, value: str) -> None:
        if key in self and self[key] != value and self.index > 0:
            key = f"{key} (request {self.index + 1})"
        super().__setitem__(key, value)


def wants(parts: list[str], reason: str, known: dict[str, str], unknown: Iterable[str]) -> Goal:
    """The goal "You want to <part>; and <part>." with its reason, known and unknown info."""
    return Goal(instruction="You want to " + "; and ".join(parts) + ".", reason=reason,
                known_info=dict(known), unknown_info=sorted(set(unknown)))


def mine(text: str) -> str:
    """'your card' -> 'my card' (the user's own words, for known_info)."""
    return re.sub(r"\byour\b", "my", text)
