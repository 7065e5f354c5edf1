"""What a world's self-play question templates are made of (Tool-R0, methods.md §3).

A world's ``design.py`` may offer ``self_play_templates() -> dict[str, Template]``: per
tool, a function that draws one *grounded* call from the database and states it as a
user would, i.e. `(arguments, a sentence in which every non-boolean argument value
appears)`, or None when the database has no suitable record. A template of a read may
add the answer the user must be told, `(arguments, sentence, facts)`: what the call's
result says that the sentence asks about (a reservation's status, a bill's amount owed).

The scripted self-play generator (`synthesis.self_play.ScriptedGenerator`) hands a
template the database of one user (`envs.ownership.scoped`: their records and the shared
ones), so every record a template draws is that user's. The sentence names records by
their ids, as the solver is asked them; the task's user says it in their own words, with
each world-internal id replaced by how a user names its record (`envs.conversation.
user_words`), so a sentence puts an internal id where a noun phrase goes ("charge
{payment_id}" becomes "charge my credit card ending in 1885"). Tools without a template
fall back to `synthesis.self_play.generic_template`.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from data.records import Fact
from envs.sql import rows

Out = tuple[dict[str, Any], str] | tuple[dict[str, Any], str, list[Fact]] | None
Template = Callable[[sqlite3.Connection, random.Random], Out]


def pick(conn: sqlite3.Connection, rng: random.Random, sql: str, *args: Any) -> dict[str, Any] | None:
    """One row of the query's result drawn with `rng` (None when it is empty)."""
    found = rows(conn, sql, *args)
    return rng.choice(found) if found else None


def told(label: str, value: Any, kind: str = "text", *also: str) -> Fact:
    """A fact of an answer: `value` as the user must hear it (numbers compare as numbers; a
    code with underscores may also be said with spaces), or any of `also`."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    spellings = [str(value)] + ([str(value).replace("_", " ")] if "_" in str(value) else []) + list(also)
    return Fact(label=label, any_of=list(dict.fromkeys(spellings)), kind=kind)  # type: ignore[arg-type]


def each(label: str, values: list[Any], kind: str = "text") -> list[Fact]:
    """One fact per value (every item of a list answer must be said)."""
    return [told(label, v, kind) for v in values]


Question = tuple[str, list[Fact]]


def ask(conn: sqlite3.Connection, rng: random.Random, sql: str, key: str,
        questions: Callable[[dict[str, Any], Any], list[Question]], *args: Any) -> Out:
    """A read of one record drawn by `sql` (its `key` column the call's one argument), asked
    as one of `questions(record, id)`: a sentence and the facts of its answer. None when the
    query finds nothing or `questions` offers no sentence."""
    record = pick(conn, rng, sql, *args)
    if record is None:
        return None
    options = questions(record, record[key])
    if not options:
        return None
    question, facts = rng.choice(options)
    return {key: record[key]}, question, facts


def request(conn: sqlite3.Connection, rng: random.Random, sql: str,
            said: Callable[..., tuple[dict[str, Any], list[str]]], *args: Any,
            then: Sequence[Callable[..., tuple[str, tuple[Any, ...]]]] = ()) -> Out:
    """A write on one record drawn by `sql` (and, with `then`, the records drawn after it:
    `pick_chain`): `said(*records)` gives the call's arguments and the ways a user asks for
    it (one is drawn). None when a query finds nothing."""
    records = pick_chain(conn, rng, sql, *args, then=then)
    if records is None:
        return None
    arguments, sentences = said(*records)
    return arguments, rng.choice(sentences)


def pick_chain(conn: sqlite3.Connection, rng: random.Random, sql: str, *args: Any,
               then: Sequence[Callable[..., tuple[str, tuple[Any, ...]]]] = ()) -> list[dict[str, Any]] | None:
    """Records drawn one after another: the first by `sql`, each next by the query and
    arguments its `then` step makes of the records drawn so far (a line, then a plan it may
    move to). None as soon as a query finds nothing."""
    first = pick(conn, rng, sql, *args)
    if first is None:
        return None
    drawn = [first]
    for step in then:
        query, params = step(*drawn)
        record = pick(conn, rng, query, *params)
        if record is None:
            return None
        drawn.append(record)
    return drawn


def by_table(**phrasings: Callable[[sqlite3.Connection, dict[str, Any]], str]) -> Callable[..., str | None]:
    """A world's `phrase(conn, table, row)` hook from one phrasing per table (None for others)."""

    def phrase(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str | None:
        said = phrasings.get(table)
        return said(conn, row) if said is not None else None

    return phrase


def insist_on(conn: sqlite3.Connection, rng: random.Random, sql: str,
              wants: Callable[[dict[str, Any]], list[tuple[str, str]]], close: str) -> Out:
    """`insist` about one record drawn by `sql`: one of `wants(record)`, a (request, summary)."""
    record = pick(conn, rng, sql)
    if record is None:
        return None
    want, summary = rng.choice(wants(record))
    return insist(want, summary, close)


def insist(want: str, summary: str, close: str) -> Out:
    """A request the policy does not allow, which the user insists on: a hand-over to a human
    agent with `summary` as its note ("`want`. `close`: "`summary`".")."""
    return {"summary": summary}, f'{want}. {close}: "{summary}".'


# -- words of a sentence ------------------------------------------------------------------------

def article(phrase: str) -> str:
    """`phrase` with its indefinite article: "an annual physical", "a follow up", "a unit"."""
    first = phrase.split()[0].lower() if phrase.split() else ""
    vowel = first[:1] in "aeiou" and not first.startswith(("uni", "use", "usu", "uti", "one", "eu"))
    return f"{'an' if vowel or first.startswith(('hour', 'honest')) else 'a'} {phrase}"


def count_of(n: Any, noun: str, plural: str | None = None) -> str:
    """`n` and `noun` agreeing: "1 unit", "2 units", "1 refill", "3 checked bags"."""
    one = str(n).strip() in ("1", "1.0")
    return f"{n} {noun if one else (plural or noun + 's')}"


def enum_words(value: Any) -> str:
    """A schema enum value as a user says it: "lost_or_stolen" -> "lost or stolen"."""
    return str(value).replace("_", " ")


_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]


def month_words(period: str) -> str:
    """A 'YYYY-MM' period as said: "2026-05" -> "May 2026"."""
    year, month = str(period)[:7].split("-")
    return f"{_MONTHS[int(month) - 1]} {year}"
