"""Secret and PII scrubbing: typed placeholders for API keys, cloud and service tokens, JWTs,
private keys, e-mail addresses and phone numbers in every string of every column (JSON
strings decoded and re-encoded), keeping the values the world generated (`Synthetic`);
`Scrubber` decides each value once per row and rewrites every occurrence.

Hygiene never releases a placeholder in a tool call's arguments: a row would then teach (or,
in an rl row's reference solution, reward) a call that cannot work. `scrub_all` (and
`scrub_rows`, the release path) drops a row whose scrubbing would change any call's
arguments (`call_arguments`: the assistant turns' calls in `messages`/`prompt`, the
`reference_solution` column, the `task` JSON's reference solution and dialogue calls, a
generic row's `tool_calls`) and counts it in `ScrubReport.dropped_call_arguments`; the row
is not rewritten elsewhere and kept, since its other text already passed the value on.
`scrub_row` and `Scrubber` still rewrite everything (for records and texts, not releases)."""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from curation.hygiene.items import Row
from data.jsonish import maybe_json
from data.records import canonical_json

_B = r"(?<![A-Za-z0-9_])"  # not inside a longer token
SECRET_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "PRIVATE_KEY",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?"
            r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        ),
    ),
    ("JWT", re.compile(_B + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    (
        "AWS_SECRET_KEY",
        re.compile(
            r"(?i)(?P<label>aws.{0,20}?(?:secret|private).{0,20}?[\"']?\s*[:=]\s*[\"']?)"
            r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
    ),
    (
        "AWS_ACCESS_KEY",
        re.compile(
            _B + r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)"
            r"[A-Z0-9]{16}(?![A-Za-z0-9])"
        ),
    ),
    (
        "GITHUB_TOKEN",
        re.compile(
            _B
            + r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])"
        ),
    ),
    (
        "SLACK_TOKEN",
        re.compile(
            _B + r"(?:xox[abposre]-[A-Za-z0-9-]{10,}"
            r"|https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+)"
        ),
    ),
    ("HF_TOKEN", re.compile(_B + r"hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])")),
    ("API_KEY", re.compile(_B + r"sk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_-]{20,}")),
    (
        "EMAIL",
        re.compile(
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@"
            r"(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}(?![A-Za-z0-9-])"
        ),
    ),
    (
        "PHONE",
        re.compile(
            r"(?<![\w+-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)|\d{2,4})"
            r"[ .-]\d{3,4}[ .-]\d{3,4}(?![\w-])"
            r"|(?<![\w+])\+\d{8,15}(?![\w-])"
        ),
    ),
]


def placeholder(kind: str, n: int = 1) -> str:
    """The placeholder of the `n`-th distinct value of `kind` in a row (``[REDACTED_EMAIL]``,
    then ``[REDACTED_EMAIL_2]``, ...)."""
    return f"[REDACTED_{kind}]" if n == 1 else f"[REDACTED_{kind}_{n}]"


def _phone_ok(match: str) -> bool:
    """A phone number has 7-15 digits and is not a date (2026-05-14) or a time."""
    digits = re.sub(r"\D", "", match)
    if not 7 <= len(digits) <= 15:
        return False
    return not re.fullmatch(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}", match.strip())


# Kinds a world's tools may mint during an episode (a new line's number): a value of these
# kinds that first comes out of a tool result is the world's. A secret (API key, token) is
# the world's only when its initial state holds it: one that first appears in a tool result
# could be the host's (a sandbox's environment), so it is scrubbed.
PII_KINDS = frozenset({"EMAIL", "PHONE"})
# Keys never rewritten at any depth: ids and hashes that rewards replay and compare, and the
# recipe of the initial state (its values are the world's by definition).
SKIP_KEYS = frozenset({"id", "task_id", "trajectory_id", "tool_call_id", "schema_version", "initial_state",
                       "target_state_hash", "state_hash", "final_state_hash", "turn_tokens"})
# Keys whose values come out of the world (tool results, the target state's cells).
WORLD_KEYS = frozenset({"observation", "target_diff"})
_TASK_FIRST = ("instruction", "user", "reference_solution", "target_diff")  # a task's inputs before its outcome
_MASK = 0xF0000  # private-use code points stand for matches while later patterns run
_MASK_RE = re.compile("[\U000f0000-\U0010ffff]")
_LITERAL_BEFORE = r"(?<![A-Za-z0-9_.%+@-])"
_LITERAL_AFTER = r"(?![A-Za-z0-9_@-]|\.[A-Za-z0-9])"


def norm_value(kind: str, value: str) -> str:
    """The form two spellings of one value share: a phone's digits, an e-mail in lower case."""
    if kind == "PHONE":
        return re.sub(r"\D", "", value)
    if kind == "EMAIL":
        return value.strip().lower()
    return value


@dataclass(frozen=True)
class Match:
    """One secret or PII match: its kind, the value replaced and the label kept before it."""

    kind: str  # "" for a character of the input that looks like a mask (kept as it is)
    value: str
    label: str = ""


@functools.lru_cache(maxsize=4096)
def find_matches(text: str) -> tuple[str, tuple[Match, ...]]:
    """`text` with each match of `SECRET_PATTERNS` masked by one private-use character (so a
    later pattern never matches inside an earlier match), and the matches in mask order.

    Cached (the most recent 4,096 texts): rows repeat most of their strings (the system
    prompt, the tool schemas), and each text costs one pass per pattern."""
    found: list[Match] = []

    def mask(m: Match) -> str:
        if len(found) >= 0x10FFFD - _MASK:
            raise ValueError("too many secret/PII matches in one string to scrub")
        found.append(m)
        return chr(_MASK + len(found) - 1)

    text = _MASK_RE.sub(lambda m: mask(Match("", m.group(0))), text)
    for kind, pattern in SECRET_PATTERNS:

        def repl(m: re.Match[str], kind: str = kind) -> str:
            if kind == "PHONE" and not _phone_ok(m.group(0)):
                return m.group(0)
            if "secret" in m.re.groupindex:
                return mask(Match(kind, m.group("secret"), m.group("label")))
            return mask(Match(kind, m.group(0)))

        text = pattern.sub(repl, text)
    return text, tuple(found)


@dataclass(frozen=True)
class Synthetic:
    """Values a world generated (its users' e-mail addresses and phone numbers, ...): they are
    synthetic, never scrubbed. Kept as (kind, normalized value); a phone given with a country
    code matches the number without it."""

    values: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of_texts(cls, texts: Iterable[str]) -> Synthetic:
        """The secret/PII-looking values in `texts` (e.g. `World.synthetic_values`)."""
        found: set[tuple[str, str]] = set()
        for text in texts:
            for m in find_matches(text)[1]:
                if m.kind:
                    found.add((m.kind, norm_value(m.kind, m.value)))
        return cls(frozenset(found))

    def __contains__(self, match: object) -> bool:
        if not isinstance(match, Match) or not match.kind:
            return False
        key = norm_value(match.kind, match.value)
        if (match.kind, key) in self.values:
            return True
        return match.kind == "PHONE" and len(key) > 10 and ("PHONE", key[-10:]) in self.values

    def __or__(self, other: Synthetic) -> Synthetic:
        return Synthetic(self.values | other.values)

    def __len__(self) -> int:
        return len(self.values)


def _json_separators(raw: str) -> tuple[str, str]:
    return (", ", ": ") if re.search(r"[,:] ", raw) else (",", ":")


def _encode_like(value: Any, raw: str, decoded: Any) -> str:
    """`value` as JSON in the style `raw` (the JSON text of `decoded`) was written in."""
    if raw == canonical_json(decoded):
        return canonical_json(value)
    return json.dumps(value, ensure_ascii=False, separators=_json_separators(raw))


class Scrubber:
    """Scrubs one row (or any value) so that the same value gets the same placeholder wherever
    it is: messages, tool arguments, observations, the task JSON.

    `learn` walks the row in order and decides each match once: a value in `synthetic` (the
    world's data) is kept, as is an e-mail or phone number that first comes out of a tool
    result (the world minted it); any other is replaced, the n-th distinct one of a kind by
    ``[REDACTED_<KIND>_<n>]``. `apply` then rewrites every occurrence of a replaced value,
    also where no pattern matches it (a secret without its label), and can be applied to
    other values of the same row (its trajectory record). Holds raw values: never report it.
    """

    def __init__(self, synthetic: Synthetic | None = None) -> None:
        self.synthetic = synthetic or Synthetic()
        self.placeholders: dict[tuple[str, str], str] = {}  # (kind, normalized value) -> placeholder
        self.spellings: dict[str, tuple[str, str]] = {}  # raw spelling -> (kind, placeholder)
        self.kept: set[tuple[str, str]] = set()
        self.counts: Counter[str] = Counter()  # replacements by kind (by `apply`)
        self.kept_counts: Counter[str] = Counter()  # matches left alone as the world's, by kind
        self.by_column: Counter[str] = Counter()  # replacements by row column (by `scrub_row`)
        self._n: Counter[str] = Counter()
        self._literal: re.Pattern[str] | None = None

    def __bool__(self) -> bool:
        return bool(self.placeholders)

    def decide(self, m: Match, world: bool) -> str | None:
        """The placeholder of `m`, or None to keep it (deciding it if it is new)."""
        key = (m.kind, norm_value(m.kind, m.value))
        if key in self.placeholders:
            self._spell(m, self.placeholders[key])
            return self.placeholders[key]
        if key in self.kept:
            return None
        if m in self.synthetic or (world and m.kind in PII_KINDS):
            self.kept.add(key)
            return None
        self._n[m.kind] += 1
        ph = self.placeholders[key] = placeholder(m.kind, self._n[m.kind])
        self._spell(m, ph)
        return ph

    def _spell(self, m: Match, ph: str) -> None:
        if m.value not in self.spellings:
            self.spellings[m.value] = (m.kind, ph)
            self._literal = None

    def learn(self, value: Any, world: bool = False) -> None:
        """Decide every match in `value` (pass one)."""

        def see(text: str, world: bool) -> str:
            for m in find_matches(text)[1]:
                if m.kind:
                    self.decide(m, world)
            return text

        _walk(value, see, world)

    def apply(self, value: Any) -> Any:
        """`value` with every replaced value rewritten (pass two); undecided matches are kept."""
        return _walk(value, lambda text, world: self.rewrite(text), False)

    def scrub(self, value: Any) -> Any:
        self.learn(value)
        return self.apply(value)

    def rewrite(self, text: str) -> str:
        masked, found = find_matches(text)
        if self.spellings:
            if self._literal is None:
                alts = "|".join(re.escape(s) for s in sorted(self.spellings, key=len, reverse=True))
                self._literal = re.compile(f"{_LITERAL_BEFORE}(?:{alts}){_LITERAL_AFTER}")

            def literal(m: re.Match[str]) -> str:
                kind, ph = self.spellings[m.group(0)]
                self.counts[kind] += 1
                return ph

            masked = self._literal.sub(literal, masked)
        if not found:
            return masked

        def unmask(mm: re.Match[str]) -> str:
            m = found[ord(mm.group(0)) - _MASK]
            if not m.kind:
                return m.value
            ph = self.placeholders.get((m.kind, norm_value(m.kind, m.value)))
            if ph is None:
                self.kept_counts[m.kind] += 1
                return m.label + m.value
            self.counts[m.kind] += 1
            return m.label + ph

        return _MASK_RE.sub(unmask, masked)


def _walk(value: Any, fn: Callable[[str, bool], str], world: bool) -> Any:
    """`value` with `fn(text, world)` applied to each string (JSON held in strings decoded and
    re-encoded only when something changed); `world`: the text came out of the world (a tool
    message, an observation, a target diff). Keys in `SKIP_KEYS` are left as they are."""
    if isinstance(value, str):
        if value.lstrip()[:1] in ("{", "["):
            try:
                decoded = json.loads(value)
            except json.JSONDecodeError:
                decoded = None
            if isinstance(decoded, dict | list):
                cleaned = _walk(decoded, fn, world)
                return value if cleaned == decoded else _encode_like(cleaned, value, decoded)
        return fn(value, world)
    if isinstance(value, dict):
        inner = world or value.get("role") == "tool"
        order = list(value)
        if "target_diff" in value and "instruction" in value:  # a task: its inputs first
            order = [k for k in _TASK_FIRST if k in value] + [k for k in value if k not in _TASK_FIRST]
        done = {k: value[k] if k in SKIP_KEYS else _walk(value[k], fn, inner or k in WORLD_KEYS) for k in order}
        return {k: done[k] for k in value}
    if isinstance(value, list | tuple):
        return [_walk(v, fn, world) for v in value]
    return value


def scrub_text(text: str, counts: Counter[str] | None = None) -> str:
    """`text` with every secret and PII match replaced by its typed placeholder."""
    s = Scrubber()
    out = s.scrub(text)
    if counts is not None:
        counts.update(s.counts)
    return out


class ScrubReport(BaseModel):
    rows: int = 0
    rows_changed: int = 0
    replacements: dict[str, int] = Field(default_factory=dict)  # kind -> count
    by_column: dict[str, int] = Field(default_factory=dict)  # column -> count
    # matches left alone because the world generated them (its users' e-mails, phones), by kind
    synthetic_kept: dict[str, int] = Field(default_factory=dict)
    # rows dropped, not released, because scrubbing would have written a placeholder into a
    # tool call's arguments (module docstring); `rows_changed` and the counts above cover the kept rows
    dropped_call_arguments: int = 0

    @property
    def total(self) -> int:
        return sum(self.replacements.values())


SyntheticOf = Synthetic | Callable[[Row], Synthetic | None] | None


def scrub_row(row: Row, columns: Iterable[str] | None = None,
              synthetic: SyntheticOf = None) -> tuple[Row, Scrubber]:
    """`row` with every string column (or only `columns`) scrubbed as one (see `Scrubber`),
    and its scrubber (the replacements it made, to apply to the row's records too)."""
    if not isinstance(row, dict):
        raise TypeError(f"scrub_rows takes dict rows, got {type(row).__name__}")
    only = set(columns) if columns is not None else None
    known = synthetic(row) if callable(synthetic) else synthetic
    s = Scrubber(known)
    cols = [c for c in row if only is None or c in only]
    for col in cols:
        s.learn(row[col])
    new: Row = dict(row)
    for col in cols:
        before = sum(s.counts.values())
        new[col] = s.apply(row[col])
        if n := sum(s.counts.values()) - before:
            s.by_column[col] += n
    return new, s


def scrub_rows(rows: Iterable[Row], columns: Iterable[str] | None = None,
               synthetic: SyntheticOf = None) -> tuple[list[Row], ScrubReport]:
    """Every string column (or only `columns`) of every row scrubbed; new rows and the report.
    `synthetic`: the world's values to keep, for all rows or per row (a function of the row)."""
    cols = list(columns) if columns is not None else None
    out, report, _ = scrub_all(rows, cols, synthetic)
    return out, report


def _message_calls(messages: Any) -> list[Any]:
    out: list[Any] = []
    for m in messages if isinstance(messages, list) else []:
        for c in (m.get("tool_calls") or []) if isinstance(m, dict) else []:
            fn = c.get("function", c) if isinstance(c, dict) else {}
            out.append(maybe_json(fn.get("arguments")) if isinstance(fn, dict) else c)
    return out


def call_arguments(row: Row) -> list[Any]:
    """Every tool call's arguments a row holds, decoded (module docstring): what a model learns
    to send or a reward replays."""
    out = _message_calls(row.get("messages")) + _message_calls(row.get("prompt"))
    ref = maybe_json(row.get("reference_solution"))
    out += [c.get("arguments") for c in ref if isinstance(c, dict)] if isinstance(ref, list) else []
    task = maybe_json(row.get("task"))
    if isinstance(task, dict):
        out += [c.get("arguments") for c in task.get("reference_solution") or [] if isinstance(c, dict)]
        for turn in task.get("dialogue") or []:
            if isinstance(turn, dict):
                out += [c.get("arguments") for c in turn.get("tool_calls") or [] if isinstance(c, dict)]
    calls = row.get("tool_calls")
    out += [maybe_json(c.get("arguments")) if isinstance(c, dict) else c for c in calls] if isinstance(calls, list) else []
    return out


def scrub_all(rows: Iterable[Row], columns: list[str] | None,
               synthetic: SyntheticOf) -> tuple[list[Row], ScrubReport, list[Scrubber]]:
    """`scrub_row` over `rows`: the kept rows, the report and each kept row's scrubber; a row
    whose scrubbing would change a tool call's arguments is dropped and counted."""
    report = ScrubReport()
    total: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    by_column: Counter[str] = Counter()
    out: list[Row] = []
    scrubbers: list[Scrubber] = []
    for row in rows:
        new, s = scrub_row(row, columns, synthetic)
        report.rows += 1
        if s.counts and call_arguments(new) != call_arguments(row):
            report.dropped_call_arguments += 1
            continue
        report.rows_changed += bool(s.counts)
        total.update(s.counts)
        kept.update(s.kept_counts)
        by_column.update(s.by_column)
        out.append(new)
        scrubbers.append(s)
    report.replacements = dict(sorted(total.items()))
    report.by_column = dict(by_column)
    report.synthetic_kept = dict(sorted(kept.items()))
    return out, report, scrubbers


def scrub_record(record: Any, counts: Counter[str] | None = None, scrubber: Scrubber | None = None) -> Any:
    """A copy of a pydantic record (`Task`, `Trajectory`) with every string scrubbed, or, with
    `scrubber`, with that row's replacements applied (ids and hashes are never rewritten)."""
    s = scrubber or Scrubber()
    before = s.counts.copy()
    data = s.apply(record.model_dump()) if scrubber is not None else s.scrub(record.model_dump())
    if counts is not None:
        counts.update(s.counts - before)
    return type(record).model_validate(data)
