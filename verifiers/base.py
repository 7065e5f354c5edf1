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


def applies(verifier: Verifier, task: Task) -> bool:
    """Whether `verifier` can judge `task` (a verifier may define `applies_to(task)`)."""
    check = getattr(verifier, "applies_to", None)
    return True if check is None else bool(check(task))


def primary_verifier(task: Task, names: list[str]) -> str:
    """The verifier whose verdict decides curation for `task`: the task's own
    (`metadata["verifier"]`, or constraint satisfaction for tasks with a constraint set)
    when it is configured, else the first configured one."""
    own = task.metadata.get("verifier") or ("constraint_satisfaction" if "constraints" in task.metadata else None)
    return own if own in names else names[0]


VERIFIERS: Registry[Callable[[], Verifier]] = Registry("verifier", ["verifiers.state", "verifiers.constraints"])
register = VERIFIERS.register


def get_verifier(name: str) -> Verifier:
    return VERIFIERS.get(name)()
