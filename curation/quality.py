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
from data.records import Task
from verifiers.base import applies, get_verifier


def _rate(ok: int, n: int) -> float | None:
    return round(ok / n, 4) if n else None


def sft_quality(selection: Selection, tasks: dict[str, Task]) -> dict[str, Any]:
    """The audit's figures (module docstring) over `selection.sft`."""
    policy, communicate = get_verifier("policy"), get_verifier("communicate")
    clauses: dict[str, list[int]] = {}
    informative, refusal = [0, 0], [0, 0]
    judged = reference = recovery = 0
    for traj, _ in selection.sft:
        reference += bool(traj.reference)
        recovery += failed_calls(traj) > 0
        task = tasks.get(traj.task_id)
        if task is None:
            continue
        if applies(policy, task):
            judged += 1
            for clause, (n, bad) in policy.verify(task, traj).details.get("clauses", {}).items():
                c = clauses.setdefault(clause, [0, 0])
                c[0] += n
                c[1] += bad
        v = task.verification
        bucket = refusal if v.outcome == "refusal" else informative if v.communicate else None
        if bucket is not None and applies(communicate, task):
            bucket[0] += 1
            bucket[1] += communicate.verify(task, traj).passed
    compliance = {k: _rate(n - bad, n) for k, (n, bad) in sorted(clauses.items())}
    rows = len(selection.sft)
    return {
        "rows": rows,
        "rows_judged_by_policy": judged,
        "clause_compliance": compliance,
        "clause_compliance_min": min((r for r in compliance.values() if r is not None), default=None),
        "grounded_args_rate": compliance.get("grounded_arguments"),
        "informative_reply_rate": _rate(informative[1], informative[0]),
        "refusal_explained_rate": _rate(refusal[1], refusal[0]),
        "reference_share": _rate(reference, rows),
        "recovery_rows": recovery,
    }
