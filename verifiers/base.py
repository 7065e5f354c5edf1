"""The verifier contract and registry.

A verifier judges one trajectory of one task and returns a `Verdict` carrying its name and
version. Verifiers execute; they never ask a model unless they say so in their name.
Register a new one with `@register`; `get_verifier(name)` builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from data.records import Task, Trajectory, Verdict


class Verifier(Protocol):
    name: str
    version: str

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict: ...


_VERIFIERS: dict[str, Callable[[], Verifier]] = {}


def register(name: str) -> Callable[[Callable[[], Verifier]], Callable[[], Verifier]]:
    def deco(factory: Callable[[], Verifier]) -> Callable[[], Verifier]:
        _VERIFIERS[name] = factory
        return factory

    return deco


def get_verifier(name: str) -> Verifier:
    import verifiers.state  # noqa: F401  (registers the built-in verifiers)

    if name not in _VERIFIERS:
        raise KeyError(f"unknown verifier {name!r}; known: {', '.join(sorted(_VERIFIERS))}")
    return _VERIFIERS[name]()
