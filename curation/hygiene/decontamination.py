"""Decontamination against registered evaluation sets (`register_eval_set`): word 8-gram and
13-gram overlap on instructions (every user turn) and on tool-call sequences, with the longest
matching token span reported; rows with an n-gram hit for `drop_n` are removed."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from curation.hygiene.items import item_of, normalize


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
