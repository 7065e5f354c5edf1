"""ACTION (τ²-bench, methods.md §6): the gold write actions were taken.

Every write call of the task's reference solution must appear among the trajectory's
*successful* calls with the same name and the same arguments (compared after the tool's
own argument coercion, so ``2`` and ``"2"`` for an integer argument are one value). Reads
are not required: any lookup path is fine (CoVe). Extra calls are not penalized here (the DB
basis does that). Score (ours) = share of gold writes matched, each trajectory call matching
at most one gold call; `passed` = all matched and a clean termination.
"""

from __future__ import annotations

import contextlib
from typing import Any

from data.records import Task, ToolCall, Trajectory, Verdict, canonical_json
from envs.registry import get_world
from envs.tools import ToolArgumentError, ToolSpec
from verifiers.base import OutcomeVerifier, episode_checks, register


def _key(spec: ToolSpec | None, call: ToolCall) -> str:
    args: Any = call.arguments
    if spec is not None:
        with contextlib.suppress(ToolArgumentError):  # unparseable arguments compare raw
            args = spec.validate(call.arguments)
    return canonical_json({"name": call.name, "arguments": args})


class ActionVerifier(OutcomeVerifier):
    """All gold write calls appear among the trajectory's successful calls."""

    name = "action_match"
    version = "1.0.0"
    basis_name = "ACTION"
    audit_kinds = frozenset({"drop_write", "change_argument", "stop_early"})

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        tools = get_world(task.world).tools
        gold = [c for c in task.reference_solution if c.name in tools and tools[c.name].write]
        made = [
            _key(tools.get(s.action.name), s.action)
            for s in trajectory.steps
            if s.action is not None and s.error is None
        ]
        found: list[bool] = []
        for call in gold:
            k = _key(tools[call.name], call)
            hit = k in made
            if hit:
                made.remove(k)
            found.append(hit)
        score = sum(found) / len(found) if found else 1.0
        reasons = [
            f"gold action {c.name}({canonical_json(c.arguments)}) never made"
            for c, ok in zip(gold, found, strict=True)
            if not ok
        ]
        score, clean, episode = episode_checks(
            trajectory, trajectory.final_state_hash or "", score, self.options.require_clean_termination, task
        )
        passed = all(found) and (clean or not self.options.require_clean_termination)
        return self.verdict(task, trajectory, passed, score, reasons + episode,
                            {"gold_writes": len(gold), "matched": sum(found)})


register(ActionVerifier.name)(ActionVerifier)
