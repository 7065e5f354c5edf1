"""Example verifier `call_budget`: a trajectory passes when it stays within a budget of tool
calls and errors (a process check a team might add to keep rows short and clean).

Adding it is this file plus one line (its module in `VERIFIERS`' built-ins in
`verifiers/base.py`, or a ``trajforge.verifiers`` entry point); its options come from
`RunConfig.verifier_options["call_budget"]`, and a task names it in its reward basis as
"BUDGET". `tests/verifiers/test_recipes.py` runs it, its self-audit included.
"""

from __future__ import annotations

from pydantic import Field

from data.records import Task, Trajectory, Verdict
from verifiers.base import BaseVerifier, VerifierOptions, episode_checks, register


class CallBudgetOptions(VerifierOptions):
    max_calls: int = Field(12, ge=0)  # tool calls in the whole episode
    max_errors: int = Field(0, ge=0)  # calls that came back with an error


class CallBudgetVerifier(BaseVerifier):
    name = "call_budget"
    version = "1.0.0"
    basis_name = "BUDGET"
    audit_kinds = frozenset()  # a budget does not look at outcomes: no mutant must fail it
    alternative_kinds = frozenset({"reorder_writes", "skip_reads"})  # good variants stay in budget

    def __init__(self, max_calls: int = 12, max_errors: int = 0, require_clean_termination: bool = True) -> None:
        self.max_calls = max_calls
        self.max_errors = max_errors
        self.require_clean_termination = require_clean_termination

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        calls = [s for s in trajectory.steps if s.action is not None or s.error]
        errors = sum(s.error is not None for s in calls)
        reasons = ([f"{len(calls)} tool calls, over the budget of {self.max_calls}"] if len(calls) > self.max_calls
                   else []) + ([f"{errors} failed calls (at most {self.max_errors})"] if errors > self.max_errors
                               else [])
        score = 1.0 / (1 + max(0, len(calls) - self.max_calls) + max(0, errors - self.max_errors))
        score, clean, episode = episode_checks(trajectory, trajectory.final_state_hash or "", score,
                                               self.require_clean_termination, task)
        return Verdict(trajectory_id=trajectory.id, task_id=task.id, verifier=self.name,
                       verifier_version=self.version, passed=not reasons and (clean or not self.require_clean_termination),
                       score=round(score, 6), reasons=reasons + episode, details={"calls": len(calls), "errors": errors})


register(CallBudgetVerifier.name, options=CallBudgetOptions)(CallBudgetVerifier)
