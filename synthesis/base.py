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
from data.registry import Registry
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
METHODS: Registry[Method] = Registry(
    "synthesis method", ["synthesis.logic_driven", "synthesis.constraint_guided", "synthesis.self_play"]
)
register = METHODS.register


def get_method(name: str) -> Method:
    return METHODS.get(name)


def list_methods() -> list[str]:
    return METHODS.names()
