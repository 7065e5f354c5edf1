"""The data-quality audit of a release's `sft` rows: what a careful engineer would check
before training on them, measured on every row.

- policy compliance per clause: of the policy verifier's checks over the rows' writes
  (identity, confirmed identity, grounded arguments, announce-and-confirm, no write after a
  decline), the share that hold; `clause_compliance_min` is the weakest clause;
- `grounded_args_rate`: writes whose record ids and amounts were all shown earlier;
- `informative_reply_rate`: rows of tasks with facts to tell (ids created, amounts moved)
  whose replies tell every one of them;
- `refusal_explained_rate`: rows of refused requests whose replies say it is refused, with
  the rule in the policy's words, and claim no success;
- the reference (gold dialogue) share, and rows that recover from a failed call.

Rates are None where no row is judged. Pure function over records.
"""

from __future__ import annotations

from typing import Any

from curation.base import Selection, failed_calls
from data.records import Task, Trajectory
from verifiers.base import applies, get_verifier


def _rate(ok: int, n: int) -> float | None:
    return round(ok / n, 4) if n else None


def row_quality(traj: Trajectory, task: Task | None) -> dict[str, Any]:
    """One row's counts for the audit (they add up over rows: `data.parts.sum_stats`)."""
    policy, communicate = get_verifier("policy"), get_verifier("communicate")
    out: dict[str, Any] = {"rows": 1, "reference": int(bool(traj.reference)), "recovery": int(failed_calls(traj) > 0),
                           "judged": 0, "clauses": {}, "informative": {"n": 0, "ok": 0},
                           "refusal": {"n": 0, "ok": 0}}
    if task is None:
        return out
    if applies(policy, task):
        out["judged"] = 1
        for clause, (n, bad) in policy.verify(task, traj).details.get("clauses", {}).items():
            out["clauses"][clause] = {"n": n, "bad": bad}
    v = task.verification
    bucket = "refusal" if v.outcome == "refusal" else "informative" if v.communicate else None
    if bucket is not None and applies(communicate, task):
        out[bucket] = {"n": 1, "ok": int(communicate.verify(task, traj).passed)}
    return out


def quality_figures(counts: dict[str, Any]) -> dict[str, Any]:
    """The audit's figures (module docstring) from the summed `row_quality` of the rows."""
    clauses = counts.get("clauses", {})
    compliance = {k: _rate(c["n"] - c["bad"], c["n"]) for k, c in sorted(clauses.items())}
    rows = counts.get("rows", 0)
    informative, refusal = counts.get("informative", {}), counts.get("refusal", {})
    return {
        "rows": rows,
        "rows_judged_by_policy": counts.get("judged", 0),
        "clause_compliance": compliance,
        "clause_compliance_min": min((r for r in compliance.values() if r is not None), default=None),
        "grounded_args_rate": compliance.get("grounded_arguments"),
        "informative_reply_rate": _rate(informative.get("ok", 0), informative.get("n", 0)),
        "refusal_explained_rate": _rate(refusal.get("ok", 0), refusal.get("n", 0)),
        "reference_share": _rate(counts.get("reference", 0), rows),
        "recovery_rows": counts.get("recovery", 0),
    }


def sft_quality(selection: Selection, tasks: dict[str, Task]) -> dict[str, Any]:
    """The audit's figures (module docstring) over `selection.sft`."""
    from data.parts import sum_stats

    return quality_figures(sum_stats(row_quality(traj, tasks.get(traj.task_id)) for traj, _ in selection.sft))
