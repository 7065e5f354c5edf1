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


VERIFIERS: Registry[Callable[[], Verifier]] = Registry("verifier", ["verifiers.state"])
register = VERIFIERS.register


def get_verifier(name: str) -> Verifier:
    return VERIFIERS.get(name)()
