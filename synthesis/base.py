"""The synthesis registry: a method is a function from a config to validated tasks.

Register a new method with `@register("name")`; it receives the `SynthesisConfig` and a
world and returns `SynthesisResult` (tasks plus counted drops). Every method must
validate what it emits: a task whose reference does not reach its target is a drop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data.records import Task
from envs.world import World


class SynthesisConfig(BaseModel):
    """What to synthesize. `options` carries method-specific settings."""

    model_config = ConfigDict(extra="forbid")

    method: str = "logic_driven"
    world: str = "airline"
    n_tasks: int = 8
    seed: int = 0
    scale: int = 30
    test_fraction: float = 0.2
    options: dict[str, Any] = Field(default_factory=dict)


@dataclass
class SynthesisResult:
    tasks: list[Task] = field(default_factory=list)
    drops: Counter = field(default_factory=Counter)  # reason -> count
    stats: dict[str, Any] = field(default_factory=dict)


Method = Callable[[SynthesisConfig, World], SynthesisResult]
_METHODS: dict[str, Method] = {}


def register(name: str) -> Callable[[Method], Method]:
    def deco(fn: Method) -> Method:
        _METHODS[name] = fn
        return fn

    return deco


def get_method(name: str) -> Method:
    import synthesis.logic_driven  # noqa: F401  (registers the built-in methods)

    if name not in _METHODS:
        raise KeyError(f"unknown synthesis method {name!r}; known: {', '.join(sorted(_METHODS))}")
    return _METHODS[name]


def list_methods() -> list[str]:
    import synthesis.logic_driven  # noqa: F401

    return sorted(_METHODS)
