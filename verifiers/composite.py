"""Composite verification by reward basis (τ²-bench's `reward_basis`, methods.md §6).

Each task names the checks that decide it in `task.verification.basis`, e.g.
``["DB", "COMMUNICATE", "ACTION"]``; without one it gets the default of its kind: the
verifier it names itself (`verification.verifier`, e.g. ``tests_pass``), else its synthesis
method's (`DEFAULT_BASIS`), plus COMMUNICATE when it has facts to communicate and
NL_ASSERTION when it has `nl_assertions` and a judge model is configured (whatever its own
basis says). A basis is one of the basis names verifiers declare (`Verifier.basis_name`) or
the name of any registered verifier; the composite runs those of the task and combines them:

    passed = every component passed;  score = product of the component scores (τ²-bench)

The verdict's details record the basis and each component's verifier name, version,
verdict and reasons, so a re-verification can tell which component changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data.records import Task, Trajectory, Verdict
from verifiers.base import (
    VERIFIERS,
    BaseVerifier,
    Verifier,
    applies,
    audit_kinds_for,
    basis_names,
    get_verifier,
    register,
)

DEFAULT_BASIS: dict[str, list[str]] = {
    "logic_driven": ["DB"],
    "constraint_guided": ["CONSTRAINTS"],
    "self_play": ["DB", "ACTION"],
}
FALLBACK_BASIS = ["DB"]


class CompositeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # synthesis method -> basis, for tasks that name none (merged over DEFAULT_BASIS)
    default_basis: dict[str, list[str]] = Field(default_factory=dict)
    # basis name -> verifier name, over the basis names verifiers declare (`Verifier.basis_name`)
    basis_verifiers: dict[str, str] = Field(default_factory=dict)
    # options of the component verifiers, by verifier name
    components: dict[str, dict[str, Any]] = Field(default_factory=dict)


class CompositeVerifier(BaseVerifier):
    """The task's reward basis, each basis judged by its verifier, combined by product."""

    name = "composite"
    version = "1.1.0"  # 1.1: NL_ASSERTION joins a task's own basis when a judge is configured
    takes_model = True  # handed to components that need one (the LLM judge)

    options_model = CompositeOptions
    options: CompositeOptions

    def __init__(self, options: CompositeOptions | Mapping[str, Any] | None = None, model: Any = None,
                 **fields: Any) -> None:
        super().__init__(options, model, **fields)
        self.default_basis = {**DEFAULT_BASIS, **self.options.default_basis}
        self.basis_verifiers = {**basis_names(), **self.options.basis_verifiers}
        self.component_options = dict(self.options.components)
        self._built: dict[str, Verifier] = {}
        self._shared: set[str] = set()  # components built elsewhere: their owner closes them

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
        # the outcome assertions are judged whenever a judge model is configured, whatever the
        # task's own basis says (synthesized tasks name DB/CONSTRAINTS, COMMUNICATE and POLICY)
        if self.model is not None and v.nl_assertions and "NL_ASSERTION" not in names:
            names.append("NL_ASSERTION")
        known = set(VERIFIERS.names()) - {self.name}
        unknown = [b for b in names if b not in self.basis_verifiers and b not in known]
        if unknown:
            raise ValueError(
                f"task {task.id}: unknown reward basis {unknown}; known: "
                f"{sorted(self.basis_verifiers)} or a verifier name ({', '.join(sorted(known))})"
            )
        return list(dict.fromkeys(names))

    def share(self, verifier: Verifier, options: Mapping[str, Any] | None) -> None:
        """Use `verifier` (built elsewhere with `options`, e.g. a run's own instance) as the
        component of its name, when this composite would build that one with the same
        options and has not built it yet."""
        if verifier.name not in self._built and dict(self.component_options.get(verifier.name) or {}) == dict(options or {}):
            self._built[verifier.name] = verifier
            self._shared.add(verifier.name)

    def component(self, basis: str) -> Verifier:
        name = self.basis_verifiers.get(basis, basis)
        if name not in self._built:
            self._built[name] = get_verifier(name, self.component_options.get(name), model=self.model)
        return self._built[name]

    def close(self) -> None:
        for name, v in self._built.items():
            close = getattr(v, "close", None) if name not in self._shared else None
            if callable(close):
                close()

    def audit_kinds_for(self, task: Task) -> tuple[frozenset[str], frozenset[str]]:
        """Every kind a component must kill; the alternatives every component must pass."""
        kills: set[str] = set()
        alternatives: set[str] | None = None
        for b in self.basis(task):
            k, a = audit_kinds_for(self.component(b), task)
            kills |= k
            alternatives = set(a) if alternatives is None else alternatives & a
        return frozenset(kills), frozenset(alternatives or ())

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
        return self.verdict(task, trajectory, passed, score, reasons, {"basis": basis, "components": components})


register(CompositeVerifier.name)(CompositeVerifier)
