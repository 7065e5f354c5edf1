"""Release hygiene: deduplication, decontamination and secret/PII scrubbing (pure functions).

Everything here takes rows (released `sft`/`rl` rows, or any dict with `instruction` and
`tool_calls`), records (`Task`, `Trajectory`) or plain strings, and returns new rows plus a
typed report for the dataset card. Nothing reads or writes files.

- **Exact dedup**: content hash of the normalized instruction (NFKC, lower case, collapsed
  whitespace) plus the tool-call sequence (names and canonical JSON arguments).
- **Near dedup** (ours): MinHash LSH (`datasketch`) over character 5-gram shingles of
  instruction + tool sequence, counted with multiplicity (a shingle's k-th occurrence is its
  own element, so a text that repeats another twice is not its duplicate); LSH candidates are
  confirmed with the exact Jaccard; default threshold 0.85. Checked within the release and
  against earlier releases' texts; the first occurrence is kept.
- **Decontamination**: against registered evaluation sets (`register_eval_set`), word 8-gram
  and 13-gram overlap, each on instructions (every user turn) and on tool-call sequences,
  with the longest matching token span reported. Rows with an n-gram hit for `drop_n`
  (default 13) are removed.
- **Scrubbing**: API keys (``sk-...``), AWS access and secret keys, GitHub, Slack and Hugging
  Face tokens, JWTs, PEM private-key blocks, e-mail addresses and phone numbers become typed
  placeholders (``[REDACTED_EMAIL]``) in every string of every column; strings that hold JSON
  are decoded, scrubbed and re-encoded so they stay valid JSON.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from data.records import Task, Trajectory, canonical_json, content_hash

Row = dict[str, Any]

# -- the items hygiene compares --------------------------------------------------------------


@dataclass
class Item:
    """What hygiene looks at in one row or record."""

    id: str
    instruction: str  # the first user turn (the task as posed)
    user_texts: list[str] = field(default_factory=list)  # every user turn
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)

    def tool_text(self) -> str:
        return " ".join(f"{name}({canonical_json(args)})" for name, args in self.tool_calls)


def normalize(text: str) -> str:
    """NFKC, lower case, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _content(m: dict[str, Any]) -> str:
    c = m.get("content") or ""
    if isinstance(c, list):
        return " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
    return str(c)


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _from_messages(rid: str, messages: Sequence[dict[str, Any]]) -> Item:
    users = [_content(m) for m in messages if m.get("role") == "user"]
    calls: list[tuple[str, Any]] = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for c in m.get("tool_calls") or []:
            fn = c.get("function", c)
            calls.append((str(fn.get("name", "")), _args(fn.get("arguments", {}))))
    return Item(rid, users[0] if users else "", users, calls)


def item_of(x: Any) -> Item:
    """An `Item` from an `sft`/`rl` row, a generic row (`instruction`, `tool_calls`), a `Task`,
    a `Trajectory` or a string."""
    if isinstance(x, Task):
        return Item(
            x.id,
            x.instruction,
            [x.instruction],
            [(c.name, c.arguments) for c in x.reference_solution],
        )
    if isinstance(x, Trajectory):
        item = _from_messages(x.id, x.messages)
        item.tool_calls = [(c.name, c.arguments) for c in x.actions()]
        return item
    if isinstance(x, str):
        return Item("text-" + content_hash(x), x, [x], [])
    if not isinstance(x, dict):
        raise TypeError(
            f"hygiene takes rows (dicts), Task, Trajectory or str; got {type(x).__name__}"
        )
    rid = str(x.get("trajectory_id") or x.get("id") or x.get("task_id") or "row-" + content_hash(x))
    if "messages" in x:
        return _from_messages(rid, x["messages"])
    if "prompt" in x:
        item = _from_messages(rid, x["prompt"])
        if isinstance(x.get("task"), str):
            task = json.loads(x["task"])
            item.tool_calls = [
                (c["name"], c.get("arguments", {})) for c in task.get("reference_solution", [])
            ]
        return item
    if "instruction" in x:
        calls = [
            (c["name"], _args(c.get("arguments", {}))) if isinstance(c, dict) else (str(c[0]), c[1])
            for c in x.get("tool_calls", [])
        ]
        return Item(rid, str(x["instruction"]), [str(x["instruction"])], calls)
    raise ValueError(
        f"row {rid}: no messages, prompt or instruction to check (columns: {sorted(x)})"
    )


# -- deduplication ---------------------------------------------------------------------------


def exact_key(item: Item) -> str:
    """Content hash of the normalized instruction and the tool-call sequence."""
    return content_hash(
        [normalize(item.instruction), [[n, a] for n, a in item.tool_calls]], length=32
    )


def shingles(item: Item, k: int = 5) -> set[str]:
    """Character k-grams of instruction + tool sequence, each occurrence counted separately."""
    text = normalize(item.instruction) + " || " + normalize(item.tool_text())
    seen: Counter[str] = Counter()
    out: set[str] = set()
    for i in range(max(1, len(text) - k + 1)):
        g = text[i : i + k]
        out.add(f"{g}\x00{seen[g]}")
        seen[g] += 1
    return out


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


class DedupReport(BaseModel):
    input: int = 0
    kept: int = 0
    exact_duplicates: int = 0  # within the release
    near_duplicates: int = 0
    exact_vs_earlier: int = 0  # against earlier releases
    near_vs_earlier: int = 0
    earlier_items: int = 0
    threshold: float = 0.85
    examples: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def removed(self) -> int:
        return self.input - self.kept


def dedup(
    rows: Sequence[Any],
    earlier: Iterable[Any] = (),
    threshold: float = 0.85,
    num_perm: int = 128,
    shingle_size: int = 5,
    max_examples: int = 10,
    seed: int = 1,
) -> tuple[list[Any], DedupReport]:
    """Rows without exact or near duplicates (within `rows`, and of `earlier` items) and the
    report."""
    from datasketch import MinHash, MinHashLSH

    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be within (0, 1], got {threshold}")
    report = DedupReport(input=len(rows), threshold=threshold)
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    keys: dict[str, tuple[str, bool]] = {}  # exact key -> (id, from earlier)
    sets: dict[str, tuple[set[str], bool, str]] = {}  # lsh key -> (shingles, from earlier, item id)

    def sketch(sh: set[str]) -> Any:
        m = MinHash(num_perm=num_perm, seed=seed)
        m.update_batch([s.encode() for s in sh])
        return m

    for i, x in enumerate(earlier):
        item = item_of(x)
        keys.setdefault(exact_key(item), (item.id, True))
        sh = shingles(item, shingle_size)
        name = f"earlier:{i}"
        sets[name] = (sh, True, item.id)
        lsh.insert(name, sketch(sh))
        report.earlier_items += 1
    kept: list[Any] = []
    for i, x in enumerate(rows):
        item = item_of(x)
        key = exact_key(item)
        if key in keys:
            other, old = keys[key]
            if old:
                report.exact_vs_earlier += 1
            else:
                report.exact_duplicates += 1
            if len(report.examples) < max_examples:
                report.examples.append(
                    {
                        "dropped": item.id,
                        "duplicate_of": other,
                        "kind": "exact",
                        "earlier": old,
                        "jaccard": 1.0,
                    }
                )
            continue
        sh = shingles(item, shingle_size)
        mh = sketch(sh)
        best: tuple[float, str, bool] | None = None
        for cand in lsh.query(mh):
            cs, old, cid = sets[cand]
            j = jaccard(sh, cs)
            if j >= threshold and (best is None or j > best[0]):
                best = (j, cid, old)
        if best is not None:
            j, cid, old = best
            if old:
                report.near_vs_earlier += 1
            else:
                report.near_duplicates += 1
            if len(report.examples) < max_examples:
                report.examples.append(
                    {
                        "dropped": item.id,
                        "duplicate_of": cid,
                        "kind": "near",
                        "earlier": old,
                        "jaccard": round(j, 4),
                    }
                )
            continue
        name = f"row:{item.id}:{i}"
        keys[key] = (item.id, False)
        sets[name] = (sh, False, item.id)
        lsh.insert(name, mh)
        kept.append(x)
    report.kept = len(kept)
    return kept, report


# -- decontamination -------------------------------------------------------------------------


@dataclass
class EvalSet:
    """An evaluation set to keep out of training data: its instructions and, where known, its
    tool-call sequences (as text, e.g. ``Item.tool_text()``)."""

    name: str
    texts: list[str]
    tool_sequences: list[str] = field(default_factory=list)


EVAL_SETS: dict[str, EvalSet] = {}


def register_eval_set(
    name: str, texts: Iterable[str], tool_sequences: Iterable[str] = ()
) -> EvalSet:
    """Register (or replace) an evaluation set under `name`."""
    es = EvalSet(name, [str(t) for t in texts], [str(t) for t in tool_sequences])
    if not es.texts and not es.tool_sequences:
        raise ValueError(f"eval set {name!r} has no texts")
    EVAL_SETS[name] = es
    return es


def get_eval_set(name: str) -> EvalSet:
    if name not in EVAL_SETS:
        raise KeyError(
            f"unknown eval set {name!r}; registered: {', '.join(sorted(EVAL_SETS)) or '(none)'}"
        )
    return EVAL_SETS[name]


def tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", normalize(text))


class _NgramIndex:
    def __init__(self, docs: list[str], n: int) -> None:
        self.n = n
        self.docs = [tokens(d) for d in docs]
        self.grams: dict[tuple[str, ...], list[tuple[int, int]]] = {}
        for j, toks in enumerate(self.docs):
            for p in range(len(toks) - n + 1):
                self.grams.setdefault(tuple(toks[p : p + n]), []).append((j, p))

    def longest(self, toks: list[str]) -> tuple[int, int, str] | None:
        """(longest match in tokens, eval doc index, matched text) over n-gram hits, or None."""
        best: tuple[int, int, str] | None = None
        for i in range(len(toks) - self.n + 1):
            for j, p in self.grams.get(tuple(toks[i : i + self.n]), ()):
                doc = self.docs[j]
                k = self.n
                while i + k < len(toks) and p + k < len(doc) and toks[i + k] == doc[p + k]:
                    k += 1
                if best is None or k > best[0]:
                    best = (k, j, " ".join(toks[i : i + k]))
        return best


class EvalSetReport(BaseModel):
    checked: int = 0
    flagged: dict[str, int] = Field(default_factory=dict)  # "<field>@<n>" -> rows
    flagged_any: int = 0
    removed: int = 0
    longest_match: int = 0
    examples: list[dict[str, Any]] = Field(default_factory=list)


class ContaminationReport(BaseModel):
    ns: list[int]
    drop_n: int | None
    eval_sets: dict[str, EvalSetReport] = Field(default_factory=dict)
    input: int = 0
    kept: int = 0


def decontaminate(
    rows: Sequence[Any],
    eval_sets: Iterable[str | EvalSet] | None = None,
    ns: Sequence[int] = (8, 13),
    drop_n: int | None = 13,
    max_examples: int = 5,
) -> tuple[list[Any], ContaminationReport]:
    """Rows without n-gram overlap with the evaluation sets (see module doc), and the report.

    `eval_sets` defaults to every registered set; `drop_n=None` only reports."""
    sets = [
        get_eval_set(e) if isinstance(e, str) else e
        for e in (EVAL_SETS.values() if eval_sets is None else eval_sets)
    ]
    if drop_n is not None and drop_n not in ns:
        raise ValueError(f"drop_n={drop_n} must be one of the n-gram sizes checked {list(ns)}")
    report = ContaminationReport(ns=list(ns), drop_n=drop_n, input=len(rows))
    indexes = {
        (es.name, fld, n): _NgramIndex(es.texts if fld == "instruction" else es.tool_sequences, n)
        for es in sets
        for fld in ("instruction", "tool_calls")
        for n in ns
    }
    items = [item_of(x) for x in rows]
    drop: set[int] = set()
    for es in sets:
        r = report.eval_sets[es.name] = EvalSetReport(checked=len(items))
        for idx, item in enumerate(items):
            fields = {
                "instruction": [tokens(t) for t in item.user_texts or [item.instruction]],
                "tool_calls": [tokens(item.tool_text())] if item.tool_calls else [],
            }
            hit_any = False
            for fld, docs in fields.items():
                for n in ns:
                    index = indexes[(es.name, fld, n)]
                    found = [m for toks in docs if (m := index.longest(toks)) is not None]
                    if not found:
                        continue
                    k, j, text = max(found)
                    key = f"{fld}@{n}"
                    r.flagged[key] = r.flagged.get(key, 0) + 1
                    r.longest_match = max(r.longest_match, k)
                    hit_any = True
                    if n == drop_n:
                        drop.add(idx)
                    if len(r.examples) < max_examples:
                        r.examples.append(
                            {
                                "row": item.id,
                                "field": fld,
                                "n": n,
                                "eval_index": j,
                                "longest_match": k,
                                "match": text[:200],
                            }
                        )
            r.flagged_any += hit_any
            r.removed += idx in drop and hit_any
    kept = [x for i, x in enumerate(rows) if i not in drop]
    report.kept = len(kept)
    return kept, report


# -- secret and PII scrubbing ----------------------------------------------------------------

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


def placeholder(kind: str) -> str:
    return f"[REDACTED_{kind}]"


def _phone_ok(match: str) -> bool:
    """A phone number has 7-15 digits and is not a date (2026-05-14) or a time."""
    digits = re.sub(r"\D", "", match)
    if not 7 <= len(digits) <= 15:
        return False
    return not re.fullmatch(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}", match.strip())


def scrub_text(text: str, counts: Counter[str] | None = None) -> str:
    """`text` with every secret and PII match replaced by its typed placeholder."""
    counts = counts if counts is not None else Counter()
    for kind, pattern in SECRET_PATTERNS:

        def repl(m: re.Match[str], kind: str = kind) -> str:
            if kind == "PHONE" and not _phone_ok(m.group(0)):
                return m.group(0)
            counts[kind] += 1
            if "secret" in m.re.groupindex:
                return m.group("label") + placeholder(kind)
            return placeholder(kind)

        text = pattern.sub(repl, text)
    return text


def _json_separators(raw: str) -> tuple[str, str]:
    return (", ", ": ") if re.search(r"[,:] ", raw) else (",", ":")


def scrub_value(value: Any, counts: Counter[str]) -> Any:
    """Scrub every string inside `value` (dicts, lists, JSON held in strings)."""
    if isinstance(value, str):
        head = value.lstrip()[:1]
        if head in ("{", "["):
            try:
                decoded = json.loads(value)
            except json.JSONDecodeError:
                decoded = None
            if isinstance(decoded, dict | list):
                before = sum(counts.values())
                cleaned = scrub_value(decoded, counts)
                if sum(counts.values()) == before:
                    return value
                return json.dumps(cleaned, ensure_ascii=False, separators=_json_separators(value))
        return scrub_text(value, counts)
    if isinstance(value, dict):
        return {k: scrub_value(v, counts) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(v, counts) for v in value]
    return value


class ScrubReport(BaseModel):
    rows: int = 0
    rows_changed: int = 0
    replacements: dict[str, int] = Field(default_factory=dict)  # kind -> count
    by_column: dict[str, int] = Field(default_factory=dict)  # column -> count

    @property
    def total(self) -> int:
        return sum(self.replacements.values())


def scrub_rows(
    rows: Iterable[Row], columns: Iterable[str] | None = None
) -> tuple[list[Row], ScrubReport]:
    """Every string column (or only `columns`) of every row scrubbed; new rows and the report."""
    only = set(columns) if columns is not None else None
    report = ScrubReport()
    total: Counter[str] = Counter()
    out: list[Row] = []
    for row in rows:
        if not isinstance(row, dict):
            raise TypeError(f"scrub_rows takes dict rows, got {type(row).__name__}")
        report.rows += 1
        new: Row = {}
        changed = False
        for col, value in row.items():
            if only is not None and col not in only:
                new[col] = value
                continue
            c: Counter[str] = Counter()
            new[col] = scrub_value(value, c)
            if c:
                changed = True
                total.update(c)
                report.by_column[col] = report.by_column.get(col, 0) + sum(c.values())
        report.rows_changed += changed
        out.append(new)
    report.replacements = dict(sorted(total.items()))
    return out, report


def scrub_record(record: Any, counts: Counter[str] | None = None) -> Any:
    """A copy of a pydantic record (`Task`, `Trajectory`) with every string scrubbed."""
    counts = counts if counts is not None else Counter()
    return type(record).model_validate(scrub_value(record.model_dump(), counts))


# -- everything, in release order --------------------------------------------------------------


class HygieneReport(BaseModel):
    scrub: ScrubReport
    dedup: DedupReport
    contamination: ContaminationReport

    def card(self) -> dict[str, Any]:
        return self.model_dump()


def clean_release(
    rows: Sequence[Row],
    earlier: Iterable[Any] = (),
    eval_sets: Iterable[str | EvalSet] | None = None,
    dedup_threshold: float = 0.85,
    drop_n: int | None = 13,
    scrub: Callable[[Iterable[Row]], tuple[list[Row], ScrubReport]] = scrub_rows,
) -> tuple[list[Row], HygieneReport]:
    """Scrub, then deduplicate, then decontaminate a release's rows."""
    scrubbed, s = scrub(rows)
    unique, d = dedup(scrubbed, earlier, threshold=dedup_threshold)
    clean, c = decontaminate(unique, eval_sets, drop_n=drop_n)
    return clean, HygieneReport(scrub=s, dedup=d, contamination=c)
