"""The synthesis registry: a method is a function from a config to validated tasks.

Register a new method with ``@register("name", options=OptionsModel, supports=fn)``; it
receives the `SynthesisConfig` and a world and returns `SynthesisResult` (tasks plus counted
drops). `options` is the pydantic model of `SynthesisConfig.options` for the method (unknown
keys are errors when the config is read; `cfg.method_options()` gives them typed);
`supports(world) -> bool` says which worlds it can synthesize in. Every method must validate
what it emits: a task whose reference does not reach its target is a drop.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.records import Task, omit_when_none
from data.registry import Registry
from envs.world import World
from synthesis.config import WriterConfig
from synthesis.texts import internal_id_leaks, user_facing_texts  # noqa: F401 (user_facing_texts re-exported)


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
    # A model that rewrites each tool-use task's scenario text (`synthesis.writer`); None:
    # the templates' text.
    writer: WriterConfig | None = None

    @model_validator(mode="after")
    def _options_fit_the_method(self) -> SynthesisConfig:
        self.method_options()
        return self

    _without_unset_writer = omit_when_none("writer")

    def method_options(self) -> Any:
        """`options` validated against the method's options model (None if it takes none)."""
        return METHODS.parse_options(canonical_method(self.method), self.options)


def split_for(task_id: str, test_fraction: float) -> str:
    """A task's provisional split by the hash of its id; `get_method`'s result replaces it
    with the split by group (`synthesis.splits.assign_splits`)."""
    bucket = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if bucket < test_fraction else "train"


@dataclass
class SynthesisResult:
    tasks: list[Task] = field(default_factory=list)
    drops: Counter = field(default_factory=Counter)  # reason -> count
    stats: dict[str, Any] = field(default_factory=dict)
    _ids: set[str] = field(default_factory=set, repr=False)  # ids of accepted tasks

    def has(self, task: Task) -> bool:
        """Whether a task with the same content id was already accepted."""
        return task.id in self._ids

    def accept(self, task: Task, test_fraction: float) -> None:
        """Assign the task its split and keep it."""
        task.split = split_for(task.id, test_fraction)
        self._ids.add(task.id)
        self.tasks.append(task)

    def keep(self, task: Task, test_fraction: float, world: World | None = None) -> bool:
        """`accept` the task unless one with its id was accepted (a `duplicate` drop) or,
        given its `world`, its user-facing text states a world-internal id (an
        `internal_id_leak` drop); whether it was kept."""
        if self.has(task):
            self.drops["duplicate"] += 1
        elif world is not None and internal_id_leaks(world, task):
            self.drops["internal_id_leak"] += 1
        else:
            self.accept(task, test_fraction)
            return True
        return False


Method = Callable[[SynthesisConfig, World], SynthesisResult]
METHODS: Registry[Method] = Registry(
    "synthesis method", ["synthesis.logic_driven", "synthesis.constraint_guided", "synthesis.self_play",
                         "synthesis.terminal", "synthesis.tau2_tasks", "synthesis.tau2_synth"]
)
register = METHODS.register


ALIASES = {"logic": "logic_driven", "logigen": "logic_driven", "constraint": "constraint_guided",
           "cove": "constraint_guided", "selfplay": "self_play"}


def canonical_method(name: str) -> str:
    return ALIASES.get(name, name)


def get_method(name: str) -> Method:
    """A synthesis method by name (short aliases such as `logic` and `cove` accepted). Its
    result is split into train and test by group (`synthesis.splits`; a method registered
    with ``keeps_splits=True`` keeps the splits its tasks come with), and its stats carry
    the split's figures under `split`. Within one call the scenario writer draws its texts
    without replacement (`synthesis.scenario.scenario_book`); with `cfg.writer` a model then
    rewrites the scenario text (`synthesis.writer`), its outcomes counted under `writer`."""
    method = METHODS.get(canonical_method(name))

    @functools.wraps(method)
    def run(cfg: SynthesisConfig, world: Any) -> SynthesisResult:
        from synthesis.scenario import scenario_book
        from synthesis.splits import assign_splits, split_figures

        with scenario_book():
            result = method(cfg, world)
        if cfg.writer is not None:
            from synthesis.writer import write_tasks

            result.tasks, counts = write_tasks(result.tasks, world, cfg.writer, cfg.seed)
            result.stats["writer"] = dict(sorted(counts.items()))
        if not METHODS.attr(canonical_method(name), "keeps_splits"):  # imported tasks keep their source's split
            assign_splits(result.tasks, cfg.test_fraction, cfg.seed)
        result.stats["split"] = split_figures(result.tasks)
        return result

    return run


def supports(name: str, world: World) -> bool:
    """Whether method `name` can synthesize tasks in `world` (its registered `supports`)."""
    check = METHODS.attr(canonical_method(name), "supports")
    return True if check is None else bool(check(world))


def list_methods() -> list[str]:
    return METHODS.names()


def draw_tasks(method: str, world: str, n: int, seed: int, max_rounds: int = 6) -> list[Task]:
    """`n` distinct tasks of `method` in the registered `world` (further seeds tried while a
    run falls short; fewer when the method does not support the world or keeps falling short)."""
    from envs.registry import get_world

    w = get_world(world)
    if not supports(method, w):
        return []
    out: list[Task] = []
    ids: set[str] = set()
    for k in range(max_rounds):
        cfg = SynthesisConfig(method=method, world=world, n_tasks=n - len(out), seed=seed + 1000 * k)
        for t in get_method(method)(cfg, w).tasks:
            if t.id not in ids:
                ids.add(t.id)
                out.append(t)
        if len(out) >= n:
            break
    return out[:n]

