"""The verifier contract and registry.

A verifier judges one trajectory of one task and returns a `Verdict` carrying its name and
version. Verifiers execute; they never ask a model unless they say so in their name.
Register a new one with `@register`; `get_verifier(name)` builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from data.records import Task, Trajectory, Verdict
from data.registry import Registry


class Verifier(Protocol):
    name: str
    version: str

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict: ...


CLEAN_TERMINATIONS = {"user_stop", "agent_stop", "transfer", "out_of_scope"}


def episode_checks(trajectory: Trajectory, replay_hash: str, score: float,
                   require_clean_termination: bool) -> tuple[float, bool, list[str]]:
    """Checks every execution verifier makes of the episode itself.

    Returns (score, clean, reasons): any termination other than the agent or the user
    stopping scores 0 (τ²-bench) when `require_clean_termination`; a replay that does not
    reproduce the state recorded during rollout is reported.
    """
    reasons: list[str] = []
    clean = trajectory.termination in CLEAN_TERMINATIONS
    if require_clean_termination and not clean:
        reasons.append(f"terminated by {trajectory.termination}")
        score = 0.0
    if trajectory.final_state_hash and trajectory.final_state_hash != replay_hash:
        reasons.append("replayed state differs from the state recorded during rollout")
    return score, clean, reasons


def applies(verifier: Verifier, task: Task) -> bool:
    """Whether `verifier` can judge `task` (a verifier may define `applies_to(task)`)."""
    check = getattr(verifier, "applies_to", None)
    return True if check is None else bool(check(task))


def primary_verifier(task: Task, names: list[str]) -> str:
    """The verifier whose verdict decides curation for `task`: the task's own
    (`verification.verifier`, or constraint satisfaction for tasks with a constraint set)
    when it is configured, else the first configured one."""
    v = task.verification
    own = v.verifier or ("constraint_satisfaction" if v.constraints is not None else None)
    return own if own in names else names[0]


VERIFIERS: Registry[Callable[[], Verifier]] = Registry("verifier", [
    "verifiers.state", "verifiers.constraints", "verifiers.communicate", "verifiers.actions",
    "verifiers.llm_judge", "verifiers.composite", "verifiers.tests"])
register = VERIFIERS.register


def get_verifier(name: str) -> Verifier:
    return VERIFIERS.get(name)()
