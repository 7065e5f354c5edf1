"""Final-state equivalence with the dense state reward (LOGIGEN, methods.md §1).

The trajectory's state-changing calls are replayed, in order, on a fresh copy of the
task's initial state; the trajectory passes when the result hashes exactly to the
target. Any path that ends in the target passes. The dense reward (ours)::

    r = exact + (1 - exact) * 0.5 * (cells_matched / cells_in_target_diff) * 1 / (1 + extra_writes)

where target cells are the (table, key, column) cells the target changed and extra writes
are changed cells outside that set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from data.records import Task, ToolCall, Trajectory, Verdict
from envs import state as st
from envs.registry import get_world
from verifiers.base import episode_checks, register

_MISSING = object()


@dataclass
class StateScore:
    exact: bool
    reward: float
    final_hash: str
    cells_matched: int
    cells_in_target: int
    extra_writes: int
    replayed_writes: int
    failed_writes: int


def dense_reward(exact: bool, matched: int, target_cells: int, extra: int) -> float:
    if exact:
        return 1.0
    ratio = matched / target_cells if target_cells else 0.0
    return 0.5 * ratio / (1 + extra)


def score_calls(task: Task, calls: list[ToolCall]) -> StateScore:
    """Replay `calls` (reads are skipped) on a fresh initial state and score the result."""
    world = get_world(task.world)
    env = world.env(task.initial_state)
    try:
        initial = st.canonical_dump(env.conn)
        writes = failed = 0
        for call in calls:
            spec = world.tools.get(call.name)
            if spec is None or not spec.write:
                continue
            writes += 1
            if not env.call(call).ok:
                failed += 1
        final = st.canonical_dump(env.conn)
    finally:
        env.close()
    final_hash = st.hash_dump(final)
    exact = final_hash == task.target_state_hash
    target = {(c["table"], c["key"], c["column"]): c for c in task.target_diff}
    matched = 0
    for (table, key, column), c in target.items():
        row = final.get(table, {}).get(key)
        value = _MISSING if row is None else row.get(column, _MISSING)
        want = _MISSING if c["op"] == "delete" else c["after"]
        matched += value == want
    changed = {ch.cell() for ch in st.diff_dumps(initial, final)}
    extra = len(changed - set(target))
    return StateScore(exact, dense_reward(exact, matched, len(target), extra), final_hash,
                      matched, len(target), extra, writes, failed)


class StateVerifier:
    """Final-state equivalence against the task's target hash, with the dense reward."""

    name = "state_equivalence"
    version = "1.0.0"

    def __init__(self, require_clean_termination: bool = True) -> None:
        self.require_clean_termination = require_clean_termination

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        s = score_calls(task, trajectory.actions())
        reasons: list[str] = []
        if not s.exact:
            reasons.append(f"final state differs from target ({s.cells_matched}/{s.cells_in_target} target cells, "
                           f"{s.extra_writes} extra cell writes)")
        score, clean, episode = episode_checks(trajectory, s.final_hash, s.reward, self.require_clean_termination)
        reasons += episode
        details: dict[str, Any] = {
            "final_hash": s.final_hash, "cells_matched": s.cells_matched, "cells_in_target": s.cells_in_target,
            "extra_writes": s.extra_writes, "replayed_writes": s.replayed_writes, "failed_writes": s.failed_writes,
        }
        return Verdict(
            trajectory_id=trajectory.id, task_id=task.id, verifier=self.name, verifier_version=self.version,
            passed=s.exact and (clean or not self.require_clean_termination), score=round(score, 6),
            reasons=reasons, details=details,
        )


register(StateVerifier.name)(StateVerifier)
