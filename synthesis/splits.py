"""Honest train/test splits: tasks are split by group, not one by one.

A task's group is its goal kind within one seeded world state (`split_group`: world,
method, the method's goal kind, generator seed). Groups that share an exact reference call
sequence or an identical instruction are joined, so no test task repeats a train task's
reference path or text. Whole groups go to test, in an order fixed by a hash of the seed
and the groups' task ids, until the test share is as close as it can get to the configured
fraction. `split_figures` measures what is left: the test share, and how many test tasks
share a call sequence, a group key, a goal kind or a tool-name sequence with a train task
(the last two are expected: other seeds of the same goal are other databases and other
arguments; a split that also kept those apart would test unseen goals, not unseen tasks).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from data.records import Task, canonical_json


def goal_kind(task: Task) -> str:
    """What a task asks for, as its method records it: the Set Designer's boundary kind
    (logic-driven), the constraint kinds (constraint-guided), the generated spec's tools
    (self-play), the seed workspace (terminal); otherwise the reference's tool names."""
    m = task.metadata
    if m.get("boundary"):
        return f"boundary:{m['boundary']}"
    if m.get("constraint_kinds"):
        return "constraints:" + "+".join(sorted(set(map(str, m["constraint_kinds"]))))
    if isinstance(m.get("spec"), dict) and m["spec"].get("tools"):
        return "spec:" + "+".join(map(str, m["spec"]["tools"]))
    if m.get("domain") and m.get("seed"):
        return f"workspace:{m['domain']}:{m['seed']}"
    return "calls:" + "+".join(c.name for c in task.reference_solution)


def split_group(task: Task) -> str:
    """The unit a split never cuts: world, method, goal kind and the generator seed."""
    return f"{task.world}|{task.method}|{goal_kind(task)}|{task.initial_state.seed}"


def call_sequence(task: Task) -> str | None:
    """The exact reference call sequence (names and canonical arguments); None when the
    reference makes no call (nothing a model could memorise from the train side)."""
    if not task.reference_solution:
        return None
    return canonical_json([c.key() for c in task.reference_solution])


class _Union:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


class SplitKeys(NamedTuple):
    """What a split looks at in one task: its side, split group, exact call sequence,
    instruction, goal kind (with world and method) and tool-name sequence."""

    split: str
    group: str
    calls: str | None
    text: str
    kind: tuple[str, str, str]
    names: tuple[str, ...]


def split_keys(task: Task) -> SplitKeys:
    return SplitKeys(task.split, split_group(task), call_sequence(task), task.instruction.strip(),
                     (task.world, task.method, goal_kind(task)), _tool_names(task))


def components(tasks: Sequence[Task] | Sequence[SplitKeys]) -> list[list[int]]:
    """Indices of `tasks` (or of their `split_keys`) grouped by split group, joined through
    shared call sequences and identical instructions; each component in task order,
    components by first member."""
    keys = [t if isinstance(t, SplitKeys) else split_keys(t) for t in tasks]
    u = _Union(len(keys))
    first: dict[tuple[str, str], int] = {}
    for i, k in enumerate(keys):
        for key in (("group", k.group), ("calls", k.calls), ("text", k.text)):
            if key[1] is None or key[1] == "":
                continue
            j = first.setdefault(key, i)  # type: ignore[arg-type]
            if j != i:
                u.join(i, j)
    out: dict[int, list[int]] = {}
    for i in range(len(keys)):
        out.setdefault(u.find(i), []).append(i)
    return list(out.values())


def _order(seed: int, ids: list[str]) -> str:
    return hashlib.sha256(f"{seed}:{min(ids)}".encode()).hexdigest()


def assign_splits(tasks: Sequence[Task], test_fraction: float, seed: int = 0) -> None:
    """Set every task's `split` in place by whole components (see the module docstring;
    `sides` decides)."""
    for t, side in zip(tasks, sides([t.id for t in tasks], [split_keys(t) for t in tasks], test_fraction, seed),
                       strict=True):
        t.split = side


def sides(ids: Sequence[str], keys: Sequence[SplitKeys], test_fraction: float, seed: int = 0) -> list[str]:
    """Each task's split ("train" or "test") from its id and `split_keys` only, by whole
    components: they are visited in a seeded hash order; one goes to test when that brings
    the test count closer to `round(test_fraction * n)` than leaving it out. With one
    component only, everything stays in train (a test set that overlaps train would not be
    honest)."""
    if not ids:
        return []
    comps = components(keys)
    target = round(test_fraction * len(ids)) if len(comps) > 1 else 0
    n_test = 0
    chosen: set[int] = set()
    for c in sorted(comps, key=lambda c: _order(seed, [ids[i] for i in c])):
        if abs(n_test + len(c) - target) < abs(n_test - target):
            chosen.update(c)
            n_test += len(c)
    return ["test" if i in chosen else "train" for i in range(len(ids))]


def split_figures(tasks: Iterable[Task] | Iterable[SplitKeys]) -> dict[str, Any]:
    """What a release's card says about its split: test share, groups, and the test tasks
    that share an exact call sequence, a split group or a goal kind with a train task. Read
    in one pass; only each task's `split_keys` are held (or given)."""
    keys = [t if isinstance(t, SplitKeys) else split_keys(t) for t in tasks]
    train = [k for k in keys if k.split != "test"]
    test = [k for k in keys if k.split == "test"]
    seqs = {k.calls for k in train if k.calls is not None}
    groups = {k.group for k in train}
    kinds = {k.kind for k in train}
    names = {k.names for k in train}
    return {
        "tasks": len(keys),
        "test": len(test),
        "test_share": round(len(test) / len(keys), 3) if keys else 0.0,
        "groups": len({k.group for k in keys}),
        "components": len(components(keys)),
        "test_sharing_call_sequence": sum(k.calls in seqs for k in test),
        "test_sharing_group": sum(k.group in groups for k in test),
        "test_sharing_goal_kind": sum(k.kind in kinds for k in test),
        "test_sharing_tool_names": sum(k.names in names for k in test),
    }


def _tool_names(task: Task) -> tuple[str, ...]:
    return tuple(c.name for c in task.reference_solution)
