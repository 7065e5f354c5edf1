"""Outcome-based curation: per-task pass rates decide.

- SFT: trajectories whose verdict passed, deduplicated per task by their action signature
  (calls, arguments, errors and unparsed calls: two rollouts making the same calls teach the
  same thing once); among duplicates the cleanest row stays (the reference dialogue before a
  policy rollout).
- RL: tasks with 0 < pass rate < 1 (mixed outcomes give GRPO reward variance), plus tasks
  no rollout solved but whose reference path the Explorer verified (hard, yet solvable).
  Tasks every rollout solved give no signal and are dropped.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from curation.base import RLPick, Selection, cleanest_first, failed_calls, register
from data.records import Task, Trajectory, Verdict, canonical_json


@dataclass
class TaskOutcome:
    task_id: str
    trials: int
    passes: int

    @property
    def pass_rate(self) -> float:
        return self.passes / self.trials if self.trials else 0.0


def pass_rates(verdicts: list[Verdict]) -> dict[str, TaskOutcome]:
    out: dict[str, TaskOutcome] = {}
    for v in verdicts:
        o = out.setdefault(v.task_id, TaskOutcome(v.task_id, 0, 0))
        o.trials += 1
        o.passes += v.passed
    return out


def action_key(t: Trajectory) -> str:
    """The row's action signature: every call with its arguments and error, and every call
    that did not parse (so a row with a failed call is never a duplicate of a clean one)."""
    return canonical_json([[s.action.name, s.action.arguments, s.error or ""] if s.action is not None
                           else ["<malformed>", s.error] for s in t.steps if s.action is not None or s.error])


class OutcomeCurator:
    """Pass-rate curation (module doc); decided within each task's group, so a run curates
    shard by shard and merges the stats with `combine_stats(..., MEANS)`."""

    name = "outcome"
    MEANS = {"policy_pass_rate": ("policy_passes", "policy_trials")}

    def select(self, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict]) -> Selection:
        sel = Selection()
        by_traj = {v.trajectory_id: v for v in verdicts}
        seen: dict[str, set[str]] = defaultdict(set)
        for t in sorted(trajectories, key=lambda t: (t.task_id, *cleanest_first(t))):
            v = by_traj.get(t.id)
            if v is None:
                sel.drops["sft:unverified"] += 1
            elif not v.passed:
                sel.drops["sft:failed_verification"] += 1
            elif action_key(t) in seen[t.task_id]:
                sel.drops["sft:duplicate_actions"] += 1
            else:
                seen[t.task_id].add(action_key(t))
                sel.sft.append((t, v))
                sel.sft_reasons[t.id] = ("reference dialogue" if t.reference else "passed") + (
                    f", recovers from {failed_calls(t)} failed call(s)" if failed_calls(t) else "")
        # Pass rates measure the policy: reference (gold) trajectories do not count.
        policy = {t.id for t in trajectories if not t.reference}
        rates = pass_rates([v for v in verdicts if v.trajectory_id in policy])
        for task in tasks:
            o = rates.get(task.id)
            if o is None:
                sel.drops["rl:no_rollouts"] += 1
            elif 0 < o.pass_rate < 1:
                sel.rl.append(RLPick(task, o.pass_rate, o.trials, "mixed_outcomes"))
            elif o.pass_rate == 0 and task.reference_solution:
                sel.rl.append(RLPick(task, o.pass_rate, o.trials, "explorer_solved_unsolved_by_policy"))
            elif o.pass_rate == 0:
                sel.drops["rl:unsolved_without_reference"] += 1
            else:
                sel.drops["rl:always_solved"] += 1
        hist = Counter(round(o.pass_rate, 2) for o in rates.values())
        sel.stats = {"tasks": len(tasks), "trajectories": len(trajectories),
                     "policy_pass_rate": round(sum(o.passes for o in rates.values())
                                               / max(1, sum(o.trials for o in rates.values())), 4),
                     "policy_passes": sum(o.passes for o in rates.values()),
                     "policy_trials": sum(o.trials for o in rates.values()),
                     "pass_rate_histogram": {str(k): n for k, n in sorted(hist.items())},
                     "sft_selected": len(sel.sft), "rl_selected": len(sel.rl)}
        return sel


register(OutcomeCurator.name)(OutcomeCurator)
