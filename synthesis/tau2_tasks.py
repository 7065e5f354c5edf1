"""τ²-bench's own tasks as trajforge tasks: the `tau2` method of the τ² worlds.

τ²'s domains ship their tasks (`tasks.json`, split by `split_tasks.json`). This method draws
`n_tasks` of them (seeded) from the configured split of the world's domain and turns each into
a trajforge task (`envs.tau2_world.task_from_tau2`): τ²'s gold actions are the reference
solution, their end state (τ²'s hash) the target, and the τ² task rides in the metadata for
τ²'s evaluator. Tasks whose gold needs the user's own tools (dual control) are dropped and
counted. Splits follow τ²'s (its test tasks never become training tasks).
"""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from synthesis.base import SynthesisConfig, SynthesisResult, register

METHOD = "tau2"


class Tau2Options(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: Literal["train", "test"] = "train"  # τ²'s split to draw from


def _supports(world: Any) -> bool:
    from envs.tau2_world import Tau2World

    return isinstance(world, Tau2World)


@register(METHOD, options=Tau2Options, supports=_supports, keeps_splits=True)
def synthesize(cfg: SynthesisConfig, world: Any) -> SynthesisResult:
    from envs.tau2_world import task_from_tau2, tau2_tasks

    opts: Tau2Options = cfg.method_options()  # type: ignore[assignment]
    result = SynthesisResult()
    pool = sorted(tau2_tasks(world.domain, opts.split), key=lambda t: str(t.id))
    random.Random(f"tau2|{world.name}|{cfg.seed}").shuffle(pool)
    for t2 in pool:
        if len(result.tasks) >= cfg.n_tasks:
            break
        try:
            task = task_from_tau2(world, t2, split=opts.split)
        except ValueError:
            result.drops["dual_control"] += 1
            continue
        if result.has(task):
            result.drops["duplicate"] += 1
            continue
        result.tasks.append(task)
        result._ids.add(task.id)
    result.stats = {"pool": len(pool), "split": opts.split}
    return result
