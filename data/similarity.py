"""How alike two instruction texts are: character n-gram sets and their Jaccard similarity,
and a task's instruction text. Decontamination (`curation.hygiene.decontamination`), the
self-play generator's diversity (`synthesis.self_play.selection`), realism figures and the τ²
importer (`synthesis.tau2_tasks`) all measure with these."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from data.records import Task


def char_ngrams(text: str, n: int = 3) -> frozenset[str]:
    """Character n-grams of the lowercased, whitespace-collapsed text."""
    t = " ".join(text.lower().split())
    return frozenset(t[i:i + n] for i in range(len(t) - n + 1)) if len(t) >= n else frozenset([t])


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two gram sets (two empty sets are alike)."""
    return len(a & b) / len(a | b) if a or b else 1.0


def scenario_text(parts: Iterable[Any]) -> str:
    """Non-empty, non-repeated parts joined: a task's instruction text."""
    out: list[str] = []
    for part in parts:
        part = str(part or "").strip()
        if part and part not in out:
            out.append(part)
    return " ".join(out)


def task_text(task: Task | dict[str, Any]) -> str:
    """A task's instruction text: instruction, reason, what the user knows, task instructions
    and reactions (a `Task` or its JSON)."""
    d = task.model_dump() if isinstance(task, Task) else task
    user = d.get("user") or {}
    known = user.get("known_info") or {}
    return scenario_text([d.get("instruction"), user.get("reason"),
                          *(known.values() if isinstance(known, dict) else [known]),
                          user.get("task_instructions"), *(user.get("reactions") or [])])
