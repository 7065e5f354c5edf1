"""Example curation strategy `shortest`: per task, the `per_task` shortest passing rollouts
(fewest tool calls, then fewest errors) go to `sft`; tasks with mixed outcomes go to `rl`.

Adding it is this file plus one line (its module in `CURATORS`' built-ins in
`curation/base.py`, or a ``trajforge.curators`` entry point); `RunConfig.curation_options`
are validated against `ShortestOptions`. `tests/verifiers/test_recipes.py` runs it.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel, ConfigDict, Field

from curation.base import RLPick, Selection, register
from data.records import Task, Trajectory, Verdict


class ShortestOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    per_task: int = Field(1, ge=1)


class ShortestCurator:
    name = "shortest"

    def __init__(self, per_task: int = 1) -> None:
        self.per_task = per_task

    def select(self, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict]) -> Selection:
        sel = Selection()
        verdict = {v.trajectory_id: v for v in verdicts}
        passing: dict[str, list[Trajectory]] = defaultdict(list)
        outcomes: dict[str, list[bool]] = defaultdict(list)
        for t in trajectories:
            v = verdict.get(t.id)
            if v is None:
                sel.drops["sft:unverified"] += 1
                continue
            if not t.reference:
                outcomes[t.task_id].append(v.passed)
            if v.passed:
                passing[t.task_id].append(t)
            else:
                sel.drops["sft:failed_verification"] += 1
        for found in passing.values():
            found.sort(key=lambda t: (len(t.steps), sum(s.error is not None for s in t.steps), t.trial))
            sel.sft += [(t, verdict[t.id]) for t in found[: self.per_task]]
            sel.drops["sft:longer_than_kept"] += max(0, len(found) - self.per_task)
        for task in tasks:
            got = outcomes.get(task.id, [])
            if got and 0 < sum(got) < len(got):
                sel.rl.append(RLPick(task, sum(got) / len(got), len(got), "mixed_outcomes"))
            else:
                sel.drops["rl:no_reward_variance"] += 1
        return sel


register(ShortestCurator.name, options=ShortestOptions)(ShortestCurator)
