"""How much a set of tasks reads like real users (issue 16): variety of the instruction
text, internal ids it leaks, which write tools it exercises, outcome assertions, and how
much the test split shares with the train split.

Each figure is a pure function of a task list (plus the world, for leaks and write tools),
so `bench/task_realism.py`, the card and tests compute them the same way. The instruction
text of a task joins `instruction` with the scenario's `reason`, `task_instructions` and
`reactions` (τ²-bench's reason_for_call + task_instructions, whose instructions include how
to react), skipping empty or repeated parts.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from data.records import Task
from envs.world import World
from synthesis.base import internal_id_leaks
from synthesis.self_play.selection import char_ngrams, jaccard

PREFIX_WORDS = 8
NGRAM = 5

# Targets on the template path with no model (issue 16, "Figures").
TARGETS: dict[str, Any] = {
    "prefix_share": (">=", 0.9),
    "median_nn_similarity": ("<=", 0.3),
    "leaked_tasks": ("==", 0),
    "write_tools_missing": ("==", 0),
    "nl_assertion_coverage": (">=", 1.0),
    "test_train_call_overlap": ("==", 0.0),
}


def instruction_text(task: Task) -> str:
    """The task's instruction joined with its scenario's reason, task instructions and reactions."""
    parts: list[str] = []
    for part in (task.instruction, task.user.reason, task.user.task_instructions, *task.user.reactions):
        part = (part or "").strip()
        if part and part not in parts:
            parts.append(part)
    return " ".join(parts)


def prefix_share(tasks: Sequence[Task], words: int = PREFIX_WORDS) -> float:
    """Distinct first-`words`-word prefixes of the instructions over the number of tasks."""
    if not tasks:
        return 0.0
    prefixes = {" ".join(t.instruction.lower().split()[:words]) for t in tasks}
    return len(prefixes) / len(tasks)


def nearest_neighbour_similarities(texts: Sequence[str], n: int = NGRAM) -> list[float]:
    """For each text, the Jaccard similarity of character `n`-grams to its most similar other text."""
    grams = [char_ngrams(t, n) for t in texts]
    out = []
    for i, g in enumerate(grams):
        out.append(max((jaccard(g, h) for j, h in enumerate(grams) if j != i), default=0.0))
    return out


def median_nn_similarity(tasks: Sequence[Task], n: int = NGRAM) -> float:
    """Median over tasks of the nearest-neighbour similarity of their instruction texts."""
    sims = nearest_neighbour_similarities([instruction_text(t) for t in tasks], n)
    return statistics.median(sims) if sims else 0.0


def mean_words(tasks: Sequence[Task]) -> float:
    """Mean number of words of the instruction texts."""
    return statistics.fmean(len(instruction_text(t).split()) for t in tasks) if tasks else 0.0


def leaked_tasks(world: World, tasks: Sequence[Task]) -> int:
    """Tasks whose user-facing text states a world-internal id (`internal_id_leaks`)."""
    return sum(bool(internal_id_leaks(world, t)) for t in tasks)


def write_tools(world: World) -> list[str]:
    """The world's tools that may change the state (declared with ``@tool(write=True)``)."""
    return sorted(name for name, spec in world.tools.items() if spec.write)


def targeted_tools(tasks: Sequence[Task]) -> set[str]:
    """Names of the tools some task's reference solution calls."""
    return {c.name for t in tasks for c in t.reference_solution}


def write_tool_coverage(world: World, tasks: Sequence[Task]) -> dict[str, Any]:
    """{covered, total, missing}: the world's write tools some task's reference calls."""
    writes = write_tools(world)
    hit = targeted_tools(tasks)
    missing = [w for w in writes if w not in hit]
    return {"covered": len(writes) - len(missing), "total": len(writes), "missing": missing}


def nl_assertion_coverage(tasks: Sequence[Task]) -> float:
    """Share of tasks with at least one natural-language outcome assertion."""
    return sum(bool(t.verification.nl_assertions) for t in tasks) / len(tasks) if tasks else 0.0


def call_sequence(task: Task) -> tuple[str, ...]:
    """The task's reference solution as canonical call keys (names and arguments)."""
    return tuple(c.key() for c in task.reference_solution)


def template_family(task: Task) -> str:
    """The goal kind a task was made from, as its method records it: the boundary kind
    (logic-driven), the constraint kinds (constraint-guided), the spec's tools (self-play);
    else the tool names of the reference solution."""
    meta = task.metadata
    if "boundary" in meta:
        return f"boundary:{meta['boundary']}"
    if "constraint_kinds" in meta:
        return "constraints:" + "+".join(sorted(meta["constraint_kinds"]))
    spec = meta.get("spec")
    if isinstance(spec, dict) and spec.get("tools"):
        return "spec:" + "+".join(spec["tools"])
    return "calls:" + "+".join(c.name for c in task.reference_solution)


def split_overlap(tasks: Sequence[Task]) -> dict[str, Any]:
    """How much the test split shares with the train split: the share of test tasks whose
    exact reference call sequence is some train task's, and the share whose template family
    some train task has (both 0.0 with no test tasks)."""
    train = [t for t in tasks if t.split == "train"]
    test = [t for t in tasks if t.split == "test"]
    seqs = {call_sequence(t) for t in train}
    families = {template_family(t) for t in train}
    n = len(test)
    return {
        "test": n,
        "train": len(train),
        "call_overlap": sum(call_sequence(t) in seqs for t in test) / n if n else 0.0,
        "family_overlap": sum(template_family(t) in families for t in test) / n if n else 0.0,
    }


def realism_figures(world: World, tasks: Sequence[Task]) -> dict[str, Any]:
    """Every figure of one method × world task list."""
    overlap = split_overlap(tasks)
    cov = write_tool_coverage(world, tasks)
    return {
        "tasks": len(tasks),
        "prefix_share": round(prefix_share(tasks), 3),
        "median_nn_similarity": round(median_nn_similarity(tasks), 3),
        "mean_words": round(mean_words(tasks), 1),
        "leaked_tasks": leaked_tasks(world, tasks),
        "write_tools_covered": cov["covered"],
        "write_tools_total": cov["total"],
        "write_tools_missing": cov["missing"],
        "nl_assertion_coverage": round(nl_assertion_coverage(tasks), 3),
        "test_tasks": overlap["test"],
        "test_train_call_overlap": round(overlap["call_overlap"], 3),
        "test_train_family_overlap": round(overlap["family_overlap"], 3),
        "families": len({template_family(t) for t in tasks}),
    }


def meets(figures: dict[str, Any], targets: dict[str, Any] = TARGETS) -> dict[str, bool]:
    """Per target figure, whether `figures` meets it (a missing-tools list counts by length)."""
    out = {}
    for key, (op, bound) in targets.items():
        value = figures[key]
        if isinstance(value, list):
            value = len(value)
        out[key] = {">=": value >= bound, "<=": value <= bound, "==": value == bound}[op]
    return out
