"""Composite verification by reward basis (τ²-bench's `reward_basis`, methods.md §6).

Each task names the checks that decide it in `task.verification.basis`, e.g.
``["DB", "COMMUNICATE", "ACTION"]``; without one it gets the default of its kind: the
verifier it names itself (`verification.verifier`, e.g. ``tests_pass``), else its synthesis
method's (`DEFAULT_BASIS`), plus COMMUNICATE when it has facts to communicate and
NL_ASSERTION when it has `nl_assertions` and a judge model is configured. A basis is one of
`BASIS_VERIFIERS` or the name of any registered verifier; the composite runs those of the task
and combines them:

    passed = every component passed;  score = product of the component scores (τ²-bench)

The verdict's details record the basis and each component's verifier name, version,
verdict and reasons, so a re-verification can tell which component changed.
"""

from __future__ import annotations

from typing import Any

from data.records import Task, Trajectory, Verdict
from verifiers.base import VERIFIERS, Verifier, applies, get_verifier, register
from verifiers.llm_judge import JudgeModel, LLMJudgeVerifier

BASIS_VERIFIERS: dict[str, str] = {
    "DB": "state_equivalence",
    "CONSTRAINTS": "constraint_satisfaction",
    "COMMUNICATE": "communicate",
    "ACTION": "action_match",
    "NL_ASSERTION": "llm_judge",
}
DEFAULT_BASIS: dict[str, list[str]] = {
    "logic_driven": ["DB"],
    "constraint_guided": ["CONSTRAINTS"],
    "self_play": ["DB", "ACTION"],
}
FALLBACK_BASIS = ["DB"]


class CompositeVerifier:
    """The task's reward basis, each basis judged by its verifier, combined by product."""

    name = "composite"
    version = "1.0.0"

    def __init__(
        self,
        judge: JudgeModel | None = None,
        default_basis: dict[str, list[str]] | None = None,
        basis_verifiers: dict[str, str] | None = None,
    ) -> None:
        self.judge = judge
        self.default_basis = {**DEFAULT_BASIS, **(default_basis or {})}
        self.basis_verifiers = {**BASIS_VERIFIERS, **(basis_verifiers or {})}
        self._built: dict[str, Verifier] = {}

    def basis(self, task: Task) -> list[str]:
        """The reward basis of `task` (its own, else its kind's default), upper-cased."""
        v = task.verification
        if v.basis:
            names = [b.upper() if b.upper() in self.basis_verifiers else b for b in v.basis]
        else:
            names = (
                [v.verifier]
                if v.verifier and v.verifier != self.name
                else list(self.default_basis.get(task.method, FALLBACK_BASIS))
            )
            if v.communicate and "COMMUNICATE" not in names:
                names.append("COMMUNICATE")
            if self.judge is not None and v.nl_assertions and "NL_ASSERTION" not in names:
                names.append("NL_ASSERTION")
        known = set(VERIFIERS.names()) - {self.name}
        unknown = [b for b in names if b not in self.basis_verifiers and b not in known]
        if unknown:
            raise ValueError(
                f"task {task.id}: unknown reward basis {unknown}; known: "
                f"{sorted(self.basis_verifiers)} or a verifier name ({', '.join(sorted(known))})"
            )
        return list(dict.fromkeys(names))

    def component(self, basis: str) -> Verifier:
        name = self.basis_verifiers.get(basis, basis)
        if name not in self._built:
            self._built[name] = (
                LLMJudgeVerifier(self.judge)
                if name == LLMJudgeVerifier.name
                else get_verifier(name)
            )
        return self._built[name]

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        basis = self.basis(task)
        components: dict[str, dict[str, Any]] = {}
        reasons: list[str] = []
        score = 1.0
        passed = True
        for b in basis:
            v = self.component(b)
            if not applies(v, task):
                verdict = Verdict(
                    trajectory_id=trajectory.id,
                    task_id=task.id,
                    verifier=v.name,
                    verifier_version=v.version,
                    passed=False,
                    score=0.0,
                    reasons=[f"{v.name} cannot judge this task (basis {b})"],
                )
            else:
                verdict = v.verify(task, trajectory)
            components[b] = {
                "verifier": verdict.verifier,
                "version": verdict.verifier_version,
                "passed": verdict.passed,
                "score": verdict.score,
                "reasons": verdict.reasons,
            }
            reasons += [f"{b}: {r}" for r in verdict.reasons]
            score *= verdict.score
            passed = passed and verdict.passed
        return Verdict(
            trajectory_id=trajectory.id,
            task_id=task.id,
            verifier=self.name,
            verifier_version=self.version,
            passed=passed,
            score=round(score, 6),
            reasons=reasons,
            details={"basis": basis, "components": components},
        )


register(CompositeVerifier.name)(CompositeVerifier)
