"""Decontamination against registered evaluation sets (`register_eval_set`): word 8-gram and
13-gram overlap on instructions (every user turn, and the scenario of a row's task) and on
tool-call sequences, with the longest matching token span reported, and instruction
similarity (character 5-gram Jaccard, as `synthesis.realism` measures it) to each evaluation
text; rows with an n-gram hit for `drop_n`, or at least `similarity` similar to an evaluation
text, are removed.

τ²-bench's test split is an evaluation set of its own when the ``tau2`` extra is installed
(`tau2_eval_sets`: one set per domain, airline, retail and telecom, each test task's user
instructions and gold calls); `tau2_test_proximity` is the figure of how many tasks lie
within a similarity of a τ² test task."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel, Field

from curation.hygiene.items import item_of, normalize
from data.records import Task, canonical_json
from data.similarity import char_ngrams, task_text
from data.similarity import jaccard as similarity

SIM_NGRAM = 5  # characters, as synthesis.realism's nearest-neighbour similarity
TAU2_TEST_DOMAINS = ("airline", "retail", "telecom")


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


def char_grams(text: str, n: int = SIM_NGRAM) -> frozenset[str]:
    """Character `n`-grams of the lower-cased, whitespace-collapsed text."""
    return char_ngrams(text, n)


def _row_texts(x: Any, user_texts: list[str]) -> list[str]:
    """The texts of a row to check: its user turns, and its task's instruction text where the
    row carries the task (a `Task`, an `rl` row's `task` JSON)."""
    out = list(user_texts)
    task: Any = x if isinstance(x, Task) else None
    if isinstance(x, dict) and isinstance(x.get("task"), str):
        try:
            task = json.loads(x["task"])
        except ValueError:
            task = None
    if isinstance(task, (Task, dict)):
        text = task_text(task)
        if text and text not in out:
            out.append(text)
    return out


class _SimIndex:
    """The nearest evaluation text of a text (character-gram Jaccard), cached per text."""

    def __init__(self, docs: list[str]) -> None:
        self.grams = [char_grams(d) for d in docs]
        self._seen: dict[str, tuple[float, int]] = {}

    def nearest(self, text: str) -> tuple[float, int]:
        if text not in self._seen:
            g = char_grams(text)
            self._seen[text] = max(((similarity(g, h), j) for j, h in enumerate(self.grams)), default=(0.0, -1))
        return self._seen[text]


class _NgramIndex:
    """Where each token `n`-gram occurs in the evaluation docs, and the longest run of tokens
    a text shares with any of them (`longest`). Docs and texts are also kept as strings of one
    character per token, so a run's length is found by comparing slices."""

    # Answers kept for the last distinct texts (a task's rows come together and repeat its
    # texts), keyed by the one-character-per-token form: ~150 bytes a text, not a token tuple.
    MAX_MEMO = 4096

    def __init__(self, docs: list[str], n: int) -> None:
        self.n = n
        self.docs = [tokens(d) for d in docs]
        self._ids: dict[str, str] = {}  # token -> its character (never "\x00": unknown tokens)
        self._text = [self._chars(toks, grow=True) for toks in self.docs]
        # n-gram -> the token before it ("" at a doc's start) -> its (doc, position) hits
        self.grams: dict[tuple[str, ...], dict[str, list[tuple[int, int]]]] = {}
        first: set[tuple[str, ...]] = set()
        for j, toks in enumerate(self.docs):
            if (whole := tuple(toks)) in first:
                continue  # a repeat matches exactly as its first copy does, which comes first on ties
            first.add(whole)
            text = self._text[j]
            for p in range(len(toks) - n + 1):
                by_prev = self.grams.setdefault(tuple(toks[p : p + n]), {})
                by_prev.setdefault(text[p - 1] if p else "", []).append((j, p))
        self._memo: dict[str, tuple[int, int, str] | None] = {}

    def _chars(self, toks: list[str], grow: bool = False) -> str:
        if grow:
            for t in toks:
                self._ids.setdefault(t, chr(len(self._ids) + 1))
        return "".join(self._ids.get(t, "\x00") for t in toks)

    def longest(self, toks: list[str]) -> tuple[int, int, str] | None:
        """(longest match in tokens, eval doc index, matched text) over n-gram hits, or None;
        of equally long matches, the first found (by position in `toks`, then doc order)."""
        q = self._chars(toks)  # texts alike up to unknown tokens (which no run holds) have one answer
        if q not in self._memo:
            if len(self._memo) >= self.MAX_MEMO:
                self._memo.clear()
            self._memo[q] = self._longest(toks, q)
        return self._memo[q]

    def _longest(self, toks: list[str], q: str) -> tuple[int, int, str] | None:
        best: tuple[int, int, str] | None = None
        n, size = self.n, len(toks)
        for i in range(size - n + 1):
            floor = best[0] if best is not None else 0  # a run must be longer to count
            if size - i <= floor:
                break  # no run starting here or later can be longer
            here: tuple[int, int, int] | None = None  # the longest run from i: (length, doc, position)
            before = q[i - 1] if i else None
            for prev, hits in self.grams.get(tuple(toks[i : i + n]), {}).items():
                if prev and prev == before:
                    # inside runs that start one token earlier on both sides: each was a hit there,
                    # one token longer (a templated evaluation set makes these most hits)
                    continue
                for j, p in hits:
                    d = self._text[j]
                    top = min(size - i, len(d) - p)
                    if top <= floor or (here is not None and top < here[0]):
                        continue
                    lo = n  # q[i:i + lo] == d[p:p + lo]; the longest such lo, by halving
                    while lo < top:
                        mid = (lo + top + 1) // 2
                        if q[i:i + mid] == d[p:p + mid]:
                            lo = mid
                        else:
                            top = mid - 1
                    if here is None or (lo, -j, -p) > (here[0], -here[1], -here[2]):
                        here = (lo, j, p)  # of equal runs, the first doc and position, as a scan finds
            if here is not None and here[0] > floor:
                best = (here[0], here[1], " ".join(toks[i : i + here[0]]))
        return best


class EvalSetReport(BaseModel):
    checked: int = 0
    flagged: dict[str, int] = Field(default_factory=dict)  # "<field>@<n>" -> rows
    flagged_any: int = 0
    removed: int = 0
    longest_match: int = 0
    max_similarity: float = 0.0  # of a row's instruction text to this set's nearest text
    examples: list[dict[str, Any]] = Field(default_factory=list)


class ContaminationReport(BaseModel):
    ns: list[int]
    drop_n: int | None
    similarity: float | None = None  # rows at least this similar to an eval text are flagged (and dropped)
    eval_sets: dict[str, EvalSetReport] = Field(default_factory=dict)
    input: int = 0
    kept: int = 0


class Decontaminator:
    """Decontamination over rows given batch by batch (`filter`): the evaluation sets' n-gram
    indexes are built once, and the report adds up over batches."""

    def __init__(self, eval_sets: Iterable[str | EvalSet] | None = None, ns: Sequence[int] = (8, 13),
                 drop_n: int | None = 13, max_examples: int = 5, similarity: float | None = None) -> None:
        self.sets = [get_eval_set(e) if isinstance(e, str) else e
                     for e in (EVAL_SETS.values() if eval_sets is None else eval_sets)]
        if drop_n is not None and drop_n not in ns:
            raise ValueError(f"drop_n={drop_n} must be one of the n-gram sizes checked {list(ns)}")
        self.ns, self.drop_n, self.max_examples = list(ns), drop_n, max_examples
        self.similarity = similarity
        self.report = ContaminationReport(ns=list(ns), drop_n=drop_n, similarity=similarity)
        for es in self.sets:
            self.report.eval_sets[es.name] = EvalSetReport()
        self._indexes = {
            (es.name, fld, n): _NgramIndex(es.texts if fld == "instruction" else es.tool_sequences, n)
            for es in self.sets for fld in ("instruction", "tool_calls") for n in ns}
        self._sims = {es.name: _SimIndex(es.texts) for es in self.sets} if similarity is not None else {}

    def filter(self, rows: Sequence[Any]) -> list[Any]:
        """The rows of a batch without a `drop_n`-gram hit in any evaluation set."""
        self.report.input += len(rows)
        items = [item_of(x) for x in rows]
        texts = [_row_texts(x, item.user_texts or [item.instruction]) for x, item in zip(rows, items, strict=True)]
        drop: set[int] = set()
        for es in self.sets:
            r = self.report.eval_sets[es.name]
            r.checked += len(items)
            for idx, item in enumerate(items):
                fields = {
                    "instruction": [tokens(t) for t in texts[idx]],
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
                if self.similarity is not None and texts[idx]:
                    sim, j = max(self._sims[es.name].nearest(t) for t in texts[idx])
                    r.max_similarity = max(r.max_similarity, round(sim, 3))
                    if sim >= self.similarity:
                        key = f"instruction~{self.similarity:g}"
                        r.flagged[key] = r.flagged.get(key, 0) + 1
                        hit_any = True
                        if self.drop_n is not None:
                            drop.add(idx)
                        if len(r.examples) < self.max_examples:
                            r.examples.append({"row": item.id, "field": "instruction", "similarity": round(sim, 3),
                                               "eval_index": j, "match": es.texts[j][:200]})
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
    similarity: float | None = None,
) -> tuple[list[Any], ContaminationReport]:
    """Rows without n-gram overlap with the evaluation sets, nor an instruction text at least
    `similarity` similar to one (see module doc), and the report (`Decontaminator` over one
    batch).

    `eval_sets` defaults to every registered set; `drop_n=None` only reports."""
    d = Decontaminator(eval_sets, ns, drop_n, max_examples, similarity)
    return d.filter(rows), d.report


# -- τ²-bench's test split ------------------------------------------------------------------------


@cache
def _tau2_test_set(domain: str) -> EvalSet:
    """One domain's test tasks: their user instructions, and their gold *write* calls (the
    change a test task grades; lookups of the same customer are not the task)."""
    import importlib

    from tau2.environment.toolkit import ToolType

    from envs.tau2_world import tau2_task_text, tau2_tasks

    toolkit = importlib.import_module(f"tau2.domains.{domain}.environment").get_environment().tools
    writes = {n for n in toolkit.get_tools() if toolkit.tool_type(n) == ToolType.WRITE}
    tasks = tau2_tasks(domain, "test")
    calls = [" ".join(f"{a.name}({canonical_json(dict(a.arguments))})" for a in (t.evaluation_criteria.actions or [])
                      if a.requestor == "assistant" and a.name in writes)
             for t in tasks if t.evaluation_criteria is not None]
    return EvalSet(f"tau2_{domain}_test", [tau2_task_text(t) for t in tasks], [c for c in calls if c])


def tau2_eval_sets(domains: Sequence[str] = TAU2_TEST_DOMAINS) -> list[EvalSet]:
    """τ²-bench's test split of each domain as an evaluation set (``tau2_<domain>_test``),
    registered; none when the ``tau2`` extra is not installed."""
    from envs.tau2_world import available

    if not available():
        return []
    out = []
    for d in domains:
        es = _tau2_test_set(d)
        EVAL_SETS[es.name] = es
        out.append(es)
    return out


def tau2_test_proximity(tasks: Iterable[Task], threshold: float = 0.5,
                        domains: Sequence[str] = TAU2_TEST_DOMAINS) -> dict[str, Any]:
    """How many `tasks` lie within instruction similarity `threshold` of a τ² test task
    (`task_text` against `tau2_task_text`, character 5-gram Jaccard): the count (target 0),
    the highest similarity, per world, and the closest pairs. Empty without the extra."""
    sets = tau2_eval_sets(domains)
    if not sets:
        return {"available": False}
    index = [(es.name, j, g) for es in sets for j, g in enumerate(_SimIndex(es.texts).grams)]
    by_world: dict[str, dict[str, int]] = {}
    near: list[dict[str, Any]] = []
    best = 0.0
    n = 0
    for task in tasks:
        n += 1
        g = char_grams(task_text(task))
        sim, name, j = max(((similarity(g, h), s, k) for s, k, h in index), default=(0.0, "", -1))
        best = max(best, sim)
        w = by_world.setdefault(task.world, {"tasks": 0, "within": 0})
        w["tasks"] += 1
        if sim >= threshold:
            w["within"] += 1
            near.append({"task": task.id, "world": task.world, "similarity": round(sim, 3), "eval_set": name,
                         "eval_index": j, "tau2_id": (task.metadata.get("tau2_task") or {}).get("id")})
    near.sort(key=lambda x: -x["similarity"])
    return {"available": True, "threshold": threshold, "tasks": n, "within": len(near),
            "max_similarity": round(best, 3), "by_world": by_world, "closest": near[:10]}
