"""Release hygiene: deduplication, decontamination and secret/PII scrubbing (pure functions).

Everything here takes rows (released `sft`/`rl` rows, or any dict with `instruction` and
`tool_calls`), records (`Task`, `Trajectory`) or plain strings, and returns new rows plus a
typed report for the dataset card. Nothing reads or writes files.

- **Exact dedup**: content hash of the normalized instruction (NFKC, lower case, collapsed
  whitespace) plus the tool-call sequence (names and canonical JSON arguments).
- **Near dedup** (ours): MinHash LSH (`datasketch`) over character 5-gram shingles of
  instruction + tool sequence, counted with multiplicity (a shingle's k-th occurrence is its
  own element, so a text that repeats another twice is not its duplicate); LSH candidates are
  confirmed with the Jaccard estimated from their MinHash signatures (128 values: within
  about 0.03 near the threshold), so only signatures, never texts, are held; default
  threshold 0.85. Checked within the release and
  against earlier releases' texts; the first occurrence is kept.
- **Decontamination**: against registered evaluation sets (`register_eval_set`), word 8-gram
  and 13-gram overlap, each on instructions (every user turn) and on tool-call sequences,
  with the longest matching token span reported. Rows with an n-gram hit for `drop_n`
  (default 13) are removed.
- **Scrubbing**: API keys (``sk-...``), AWS access and secret keys, GitHub, Slack and Hugging
  Face tokens, JWTs, PEM private-key blocks, e-mail addresses and phone numbers become typed
  placeholders in every string of every column; strings that hold JSON are decoded, scrubbed
  and re-encoded so they stay valid JSON. Values the world generated are synthetic and kept:
  those in the task's initial state, its patches, the policy and tool schemas
  (`Synthetic`, from `World.synthetic_values`), and e-mails and phone numbers that first come
  out of a tool result (minted by the world). Each other value gets one placeholder in the
  whole row (``[REDACTED_EMAIL]``, a second one ``[REDACTED_EMAIL_2]``): messages, tool
  arguments, observations and the task JSON, whose ids, hashes and initial-state recipe are
  never rewritten (`SKIP_KEYS`). `Scrubber` decides each value once, then rewrites every
  occurrence, also where no pattern matches it (a secret without its label).
- **Re-judging**: a row that scrubbing changed is judged again on the scrubbed text (a
  `Replay` the pipeline supplies: the row's verifier) and dropped, counted, if it fails.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from data.records import Task, Trajectory, Verdict, canonical_json, content_hash

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


class BandIndex:
    """MinHash LSH in compact memory: the signatures of the rows added, as rows of a few
    large uint32 arrays, and per band a dict from the band's 64-bit hash to the rows that
    have it. `candidates` are the rows sharing at least one band with a signature, as in
    `datasketch.MinHashLSH` with the same `b` bands of `r` values (a hash collision can only
    add a candidate, and every candidate is then compared on its whole signature), in about
    a third of its memory: some 1.5 KB a row at 128 permutations, against 4 KB."""

    CHUNK = 4096  # rows per signature array

    def __init__(self, num_perm: int, b: int, r: int) -> None:
        if b * r > num_perm:
            raise ValueError(f"{b} bands of {r} values need {b * r} permutations, not {num_perm}")
        self.num_perm, self.b, self.r = num_perm, b, r
        self._chunks: list[Any] = []
        self.rows = 0
        self._bands: list[dict[int, Any]] = [{} for _ in range(b)]  # band hash -> row, or list of rows

    def signature(self, row: int) -> Any:
        return self._chunks[row // self.CHUNK][row % self.CHUNK]

    def _keys(self, sig: Any) -> list[int]:
        data = sig.tobytes()
        width = 4 * self.r
        return [hash(data[i * width:(i + 1) * width]) for i in range(self.b)]

    def add(self, sig: Any) -> int:
        """Add a signature (uint32 values); its row number."""
        import numpy as np

        row = self.rows
        if row % self.CHUNK == 0:
            self._chunks.append(np.zeros((self.CHUNK, self.num_perm), dtype=np.uint32))
        self._chunks[-1][row % self.CHUNK] = sig
        for band, key in zip(self._bands, self._keys(sig), strict=True):
            had = band.get(key)
            band[key] = row if had is None else ([had, row] if isinstance(had, int) else [*had, row])
        self.rows += 1
        return row

    def candidates(self, sig: Any) -> set[int]:
        out: set[int] = set()
        for band, key in zip(self._bands, self._keys(sig), strict=True):
            had = band.get(key)
            if had is not None:
                out.update((had,) if isinstance(had, int) else had)
        return out


class Deduper:
    """Exact and near deduplication over rows given batch by batch (`filter`), in memory that
    grows with the rows kept by about 1.6 KB each (an exact key, a MinHash signature of
    `num_perm` 32-bit values and its band hashes in a `BandIndex`, the item id), never with
    their text. `add_earlier` first loads earlier releases' items, which count as seen but
    are never kept."""

    def __init__(self, threshold: float = 0.85, num_perm: int = 128, shingle_size: int = 5,
                 max_examples: int = 10, seed: int = 1) -> None:
        from datasketch import MinHashLSH

        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be within (0, 1], got {threshold}")
        self.threshold, self.num_perm, self.shingle_size = threshold, num_perm, shingle_size
        self.max_examples, self.seed = max_examples, seed
        self.report = DedupReport(threshold=threshold)
        params = MinHashLSH(threshold=threshold, num_perm=num_perm)  # its bands and rows for the threshold
        self._index = BandIndex(num_perm, params.b, params.r)
        self._keys: dict[int, int] = {}  # exact key (as an int) -> row of the index
        self._ids: list[str] = []  # row -> item id
        self._earlier = bytearray()  # row -> 1 when from an earlier release

    def _sketch(self, item: Item) -> Any:
        """The item's MinHash signature as uint32 values (MinHash values are < 2**32)."""
        import numpy as np
        from datasketch import MinHash

        m = MinHash(num_perm=self.num_perm, seed=self.seed)
        m.update_batch([s.encode() for s in shingles(item, self.shingle_size)])
        return m.hashvalues.astype(np.uint32)

    def _insert(self, key: int, sig: Any, earlier: bool, item_id: str) -> None:
        row = self._index.add(sig)
        self._keys.setdefault(key, row)
        self._ids.append(item_id)
        self._earlier.append(earlier)

    def _example(self, item: Item, other: str, kind: str, earlier: bool, j: float) -> None:
        if len(self.report.examples) < self.max_examples:
            self.report.examples.append({"dropped": item.id, "duplicate_of": other, "kind": kind,
                                         "earlier": earlier, "jaccard": round(j, 4)})

    def add_earlier(self, items: Iterable[Any]) -> None:
        """Items of earlier releases: a row equal or near to one of them is dropped."""
        for x in items:
            item = item_of(x)
            self._insert(int(exact_key(item), 16), self._sketch(item), True, item.id)
            self.report.earlier_items += 1

    def filter(self, rows: Iterable[Any]) -> list[Any]:
        """The rows of a batch that duplicate nothing seen before (earlier items, kept rows)."""
        import numpy as np

        kept: list[Any] = []
        for x in rows:
            self.report.input += 1
            item = item_of(x)
            key = int(exact_key(item), 16)
            if key in self._keys:
                row = self._keys[key]
                old = bool(self._earlier[row])
                if old:
                    self.report.exact_vs_earlier += 1
                else:
                    self.report.exact_duplicates += 1
                self._example(item, self._ids[row], "exact", old, 1.0)
                continue
            sig = self._sketch(item)
            best: tuple[float, int] | None = None
            for cand in sorted(self._index.candidates(sig)):
                j = float(np.mean(sig == self._index.signature(cand)))  # the MinHash estimate of the Jaccard
                if j >= self.threshold and (best is None or j > best[0]):
                    best = (j, cand)
            if best is not None:
                j, row = best
                old = bool(self._earlier[row])
                if old:
                    self.report.near_vs_earlier += 1
                else:
                    self.report.near_duplicates += 1
                self._example(item, self._ids[row], "near", old, j)
                continue
            self._insert(key, sig, False, item.id)
            kept.append(x)
        self.report.kept += len(kept)
        return kept


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
    report (`Deduper` over one batch)."""
    d = Deduper(threshold, num_perm, shingle_size, max_examples, seed)
    d.add_earlier(earlier)
    return d.filter(rows), d.report


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


class Decontaminator:
    """Decontamination over rows given batch by batch (`filter`): the evaluation sets' n-gram
    indexes are built once, and the report adds up over batches."""

    def __init__(self, eval_sets: Iterable[str | EvalSet] | None = None, ns: Sequence[int] = (8, 13),
                 drop_n: int | None = 13, max_examples: int = 5) -> None:
        self.sets = [get_eval_set(e) if isinstance(e, str) else e
                     for e in (EVAL_SETS.values() if eval_sets is None else eval_sets)]
        if drop_n is not None and drop_n not in ns:
            raise ValueError(f"drop_n={drop_n} must be one of the n-gram sizes checked {list(ns)}")
        self.ns, self.drop_n, self.max_examples = list(ns), drop_n, max_examples
        self.report = ContaminationReport(ns=list(ns), drop_n=drop_n)
        for es in self.sets:
            self.report.eval_sets[es.name] = EvalSetReport()
        self._indexes = {
            (es.name, fld, n): _NgramIndex(es.texts if fld == "instruction" else es.tool_sequences, n)
            for es in self.sets for fld in ("instruction", "tool_calls") for n in ns}

    def filter(self, rows: Sequence[Any]) -> list[Any]:
        """The rows of a batch without a `drop_n`-gram hit in any evaluation set."""
        self.report.input += len(rows)
        items = [item_of(x) for x in rows]
        drop: set[int] = set()
        for es in self.sets:
            r = self.report.eval_sets[es.name]
            r.checked += len(items)
            for idx, item in enumerate(items):
                fields = {
                    "instruction": [tokens(t) for t in item.user_texts or [item.instruction]],
                    "tool_calls": [tokens(item.tool_text())] if item.tool_calls else [],
                }
                hit_any = False
                for fld, docs in fields.items():
                    for n in self.ns:
                        index = self._indexes[(es.name, fld, n)]
                        found = [m for toks in docs if (m := index.longest(toks)) is not None]
                        if not found:
                            continue
                        k, j, text = max(found)
                        key = f"{fld}@{n}"
                        r.flagged[key] = r.flagged.get(key, 0) + 1
                        r.longest_match = max(r.longest_match, k)
                        hit_any = True
                        if n == self.drop_n:
                            drop.add(idx)
                        if len(r.examples) < self.max_examples:
                            r.examples.append({"row": item.id, "field": fld, "n": n, "eval_index": j,
                                               "longest_match": k, "match": text[:200]})
                r.flagged_any += hit_any
                r.removed += idx in drop and hit_any
        kept = [x for i, x in enumerate(rows) if i not in drop]
        self.report.kept += len(kept)
        return kept


def decontaminate(
    rows: Sequence[Any],
    eval_sets: Iterable[str | EvalSet] | None = None,
    ns: Sequence[int] = (8, 13),
    drop_n: int | None = 13,
    max_examples: int = 5,
) -> tuple[list[Any], ContaminationReport]:
    """Rows without n-gram overlap with the evaluation sets (see module doc), and the report
    (`Decontaminator` over one batch).

    `eval_sets` defaults to every registered set; `drop_n=None` only reports."""
    d = Decontaminator(eval_sets, ns, drop_n, max_examples)
    return d.filter(rows), d.report


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


def scrub_all(rows: Iterable[Row], columns: list[str] | None,
               synthetic: SyntheticOf) -> tuple[list[Row], ScrubReport, list[Scrubber]]:
    report = ScrubReport()
    total: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    by_column: Counter[str] = Counter()
    out: list[Row] = []
    scrubbers: list[Scrubber] = []
    for row in rows:
        new, s = scrub_row(row, columns, synthetic)
        report.rows += 1
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


# -- re-verifying scrubbed rows -----------------------------------------------------------------

# Re-judges changed rows: given each (scrubbed row, its scrubber), the verdict on the scrubbed
# row (None: the row cannot be judged and is dropped as such).
Replay = Callable[[list[tuple[Row, Scrubber]]], list[Verdict | None]]


class ReplayReport(BaseModel):
    """Rows that scrubbing changed, judged again by their verifier on the scrubbed text."""

    enabled: bool = False
    checked: int = 0
    passed: int = 0
    dropped: int = 0
    reasons: dict[str, int] = Field(default_factory=dict)  # first failure reason -> rows
    examples: list[dict[str, Any]] = Field(default_factory=list)


def replay_scrubbed(rows: list[Row], scrubbers: list[Scrubber], replay: Replay | None,
                    max_examples: int = 5) -> tuple[list[Row], ReplayReport]:
    """The rows that still pass their verifier after scrubbing (unchanged rows pass as they
    did); a passing row's `score` becomes the new verdict's."""
    report = ReplayReport(enabled=replay is not None)
    changed = [i for i, s in enumerate(scrubbers) if s.counts]
    if replay is None or not changed:
        return rows, report
    verdicts = replay([(rows[i], scrubbers[i]) for i in changed])
    if len(verdicts) != len(changed):
        raise ValueError(f"replay judged {len(verdicts)} rows, not the {len(changed)} it was given")
    drop: set[int] = set()
    out = list(rows)
    reasons: Counter[str] = Counter()
    for i, v in zip(changed, verdicts, strict=True):
        report.checked += 1
        if v is not None and v.passed:
            report.passed += 1
            if "score" in out[i]:
                out[i] = {**out[i], "score": v.score}
            continue
        drop.add(i)
        why = "cannot be judged" if v is None else (v.reasons or ["not passed"])[0]
        reasons[why[:160]] += 1
        if len(report.examples) < max_examples:
            report.examples.append({"row": item_of(rows[i]).id, "reason": why[:300]})
    report.dropped = len(drop)
    report.reasons = dict(reasons.most_common())
    return [r for i, r in enumerate(out) if i not in drop], report


# -- everything, in release order --------------------------------------------------------------


class HygieneReport(BaseModel):
    scrub: ScrubReport
    dedup: DedupReport
    contamination: ContaminationReport
    replay: ReplayReport = Field(default_factory=ReplayReport)

    def card(self) -> dict[str, Any]:
        return self.model_dump()


def clean_release(
    rows: Sequence[Row],
    earlier: Iterable[Any] = (),
    eval_sets: Iterable[str | EvalSet] | None = None,
    dedup_threshold: float = 0.85,
    drop_n: int | None = 13,
    columns: Iterable[str] | None = None,
    synthetic: SyntheticOf = None,
    replay: Replay | None = None,
) -> tuple[list[Row], HygieneReport]:
    """Scrub (`columns`, keeping the world's `synthetic` values), re-judge the rows scrubbing
    changed (`replay`; those that no longer pass are dropped), then deduplicate, then
    decontaminate a release's rows."""
    scrubbed, s, scrubbers = scrub_all(rows, list(columns) if columns is not None else None, synthetic)
    judged, r = replay_scrubbed(scrubbed, scrubbers, replay)
    unique, d = dedup(judged, earlier, threshold=dedup_threshold)
    clean, c = decontaminate(unique, eval_sets, drop_n=drop_n)
    return clean, HygieneReport(scrub=s, dedup=d, contamination=c, replay=r)
