"""Re-verification: re-score stored trajectories with another verifier (version), no model.

`reverify(tasks, trajectories, old_verdicts, verifier)` is a pure function over records: it
judges every trajectory whose task the verifier applies to, pairs each new verdict with the
old verdict of the same trajectory (by default the old verdict of the same verifier name;
`against=` names another), and diffs them:

- per task: trajectories re-judged, pass→fail and fail→pass flips, mean score delta;
- overall: the same counts, the largest score changes, trajectories with no old verdict.

Verifiers that need a model (`needs_model`, e.g. `llm_judge`) are refused unless
`allow_model=True`: re-verification is meant to be cheap and deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from data.records import Task, Trajectory, Verdict
from verifiers.base import Verifier, applies, get_verifier


class TaskDiff(BaseModel):
    task_id: str
    trajectories: int = 0
    compared: int = 0  # with an old verdict to compare to
    pass_to_fail: int = 0
    fail_to_pass: int = 0
    old_passed: int = 0
    new_passed: int = 0
    score_delta_sum: float = 0.0

    @property
    def mean_score_delta(self) -> float:
        return round(self.score_delta_sum / self.compared, 6) if self.compared else 0.0


class VerdictChange(BaseModel):
    trajectory_id: str
    task_id: str
    old_passed: bool
    new_passed: bool
    old_score: float
    new_score: float
    new_reasons: list[str] = Field(default_factory=list)


class ReverifyDiff(BaseModel):
    verifier: str
    version: str
    against: str
    against_versions: list[str] = Field(default_factory=list)
    tasks: dict[str, TaskDiff] = Field(default_factory=dict)
    changes: list[VerdictChange] = Field(default_factory=list)  # flips and score changes
    missing_old: int = 0  # re-judged trajectories with no old verdict
    not_applicable: int = 0  # trajectories whose task the verifier cannot judge
    unknown_task: int = 0  # trajectories whose task is not among `tasks`
    tasks_upgraded: int = 0  # old tasks judged as today's synthesis makes them (set by the caller)
    not_released: int = 0  # trajectories of tasks not released any more (failed, unjudged)

    def totals(self) -> dict[str, Any]:
        t = self.tasks.values()
        compared = sum(d.compared for d in t)
        return {
            "verifier": f"{self.verifier}@{self.version}",
            "against": f"{self.against}@{','.join(self.against_versions) or '-'}",
            "trajectories": sum(d.trajectories for d in t),
            "compared": compared,
            "pass_to_fail": sum(d.pass_to_fail for d in t),
            "fail_to_pass": sum(d.fail_to_pass for d in t),
            "old_pass_rate": round(sum(d.old_passed for d in t) / compared, 4)
            if compared
            else None,
            "new_pass_rate": round(
                sum(d.new_passed for d in t) / max(1, sum(d.trajectories for d in t)), 4
            ),
            "mean_score_delta": round(sum(d.score_delta_sum for d in t) / compared, 6)
            if compared
            else 0.0,
            "tasks_with_flips": sum(1 for d in t if d.pass_to_fail or d.fail_to_pass),
            "missing_old": self.missing_old,
            "not_applicable": self.not_applicable,
            "unknown_task": self.unknown_task,
            "tasks_upgraded": self.tasks_upgraded,
            "not_released": self.not_released,
        }

    def table(self, only_changed: bool = True) -> str:
        """The per-task diff as a Markdown table (tasks with a flip or a score change)."""
        head = (
            "| task | trajectories | compared | pass→fail | fail→pass | mean Δscore |\n"
            "|---|---:|---:|---:|---:|---:|"
        )
        rows = [
            f"| {d.task_id} | {d.trajectories} | {d.compared} | {d.pass_to_fail} "
            f"| {d.fail_to_pass} | {d.mean_score_delta:+.4f} |"
            for d in sorted(self.tasks.values(), key=lambda d: d.task_id)
            if not only_changed or d.pass_to_fail or d.fail_to_pass or d.score_delta_sum
        ]
        tot = self.totals()
        foot = (
            f"| **all** | {tot['trajectories']} | {tot['compared']} | {tot['pass_to_fail']} "
            f"| {tot['fail_to_pass']} | {tot['mean_score_delta']:+.4f} |"
        )
        return "\n".join([head, *rows, foot])


class ReverifyResult(BaseModel):
    verdicts: list[Verdict]
    diff: ReverifyDiff


def reverify(
    tasks: Iterable[Task],
    trajectories: Iterable[Trajectory],
    old_verdicts: Iterable[Verdict],
    verifier: str | Verifier,
    against: str | None = None,
    allow_model: bool = False,
    unreleasable: Mapping[str, str] | None = None,
) -> ReverifyResult:
    """Re-judge `trajectories` with `verifier` and diff against `old_verdicts` (see module doc).
    `unreleasable`: task id -> why such a task is not released any more; its trajectories
    fail with that reason, unjudged."""
    v = get_verifier(verifier) if isinstance(verifier, str) else verifier
    if getattr(v, "needs_model", False) and not allow_model:
        raise ValueError(
            f"verifier {v.name!r} needs a model; re-verification runs without one "
            "(pass allow_model=True to run it anyway)"
        )
    by_id = {t.id: t for t in tasks}
    baseline = against or v.name
    old: dict[str, Verdict] = {}
    for o in old_verdicts:
        if o.verifier == baseline:
            if o.trajectory_id in old:
                raise ValueError(f"two old {baseline!r} verdicts for trajectory {o.trajectory_id}")
            old[o.trajectory_id] = o
    diff = ReverifyDiff(
        verifier=v.name,
        version=v.version,
        against=baseline,
        against_versions=sorted({o.verifier_version for o in old.values()}),
    )
    verdicts: list[Verdict] = []
    for traj in trajectories:
        task = by_id.get(traj.task_id)
        if task is None:
            diff.unknown_task += 1
            continue
        why = (unreleasable or {}).get(task.id)
        if why is None and not applies(v, task):
            diff.not_applicable += 1
            continue
        new = v.verify(task, traj) if why is None else Verdict(
            trajectory_id=traj.id, task_id=task.id, verifier=v.name, verifier_version=v.version,
            passed=False, score=0.0, reasons=[f"task not released any more: {why}"])
        diff.not_released += why is not None
        verdicts.append(new)
        d = diff.tasks.setdefault(task.id, TaskDiff(task_id=task.id))
        d.trajectories += 1
        d.new_passed += new.passed
        prev = old.get(traj.id)
        if prev is None:
            diff.missing_old += 1
            continue
        d.compared += 1
        d.old_passed += prev.passed
        delta = new.score - prev.score
        d.score_delta_sum = round(d.score_delta_sum + delta, 9)
        d.pass_to_fail += prev.passed and not new.passed
        d.fail_to_pass += new.passed and not prev.passed
        if prev.passed != new.passed or abs(delta) > 1e-9:
            diff.changes.append(
                VerdictChange(
                    trajectory_id=traj.id,
                    task_id=task.id,
                    old_passed=prev.passed,
                    new_passed=new.passed,
                    old_score=prev.score,
                    new_score=new.score,
                    new_reasons=new.reasons,
                )
            )
    diff.changes.sort(key=lambda c: (-abs(c.new_score - c.old_score), c.trajectory_id))
    return ReverifyResult(verdicts=verdicts, diff=diff)
