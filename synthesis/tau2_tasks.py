"""τ²-bench's own tasks as trajforge tasks: the `tau2` method of the τ² worlds.

τ²'s domains ship their tasks (`tasks.json`, split by `split_tasks.json`). This method draws
`n_tasks` of them (seeded) from the configured split of the world's domain and turns each into
a trajforge task (`envs.tau2_world.task_from_tau2`): τ²'s gold actions are the reference
solution, their end state (τ²'s hash) the target, and the τ² task rides in the metadata for
τ²'s evaluator. Tasks whose gold needs the user's own tools (dual control) are dropped and
counted. Splits follow τ²'s (its test tasks never become training tasks), and a train task
whose instructions lie within similarity 0.5 of a test task's (τ²'s own splits overlap: the
same scenario for the same customer) is left out and counted (`near_test`), as the release's
decontamination would drop it.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from data.similarity import char_ngrams, jaccard
from synthesis.base import SynthesisConfig, SynthesisResult, register

METHOD = "tau2"


class Tau2Options(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: Literal["train", "test"] = "train"  # τ²'s split to draw from
    # a train task whose instructions are this alike (character 5-gram Jaccard) to a test
    # task's is left out: the release's decontamination would drop it anyway
    max_test_similarity: float = Field(0.5, gt=0, le=1)


SIM_NGRAM = 5  # as the decontamination's instruction similarity


@cache
def _test_grams(domain: str) -> list[frozenset[str]]:
    from envs.tau2_world import tau2_task_text, tau2_tasks

    return [char_ngrams(tau2_task_text(t), SIM_NGRAM) for t in tau2_tasks(domain, "test")]


def _supports(world: Any) -> bool:
    from envs.tau2_world import Tau2World

    return isinstance(world, Tau2World)


@register(METHOD, options=Tau2Options, supports=_supports, keeps_splits=True)
def synthesize(cfg: SynthesisConfig, world: Any) -> SynthesisResult:
    from envs.tau2_world import task_from_tau2, tau2_task_text, tau2_tasks

    opts: Tau2Options = cfg.method_options()  # type: ignore[assignment]
    result = SynthesisResult()
    pool = sorted(tau2_tasks(world.domain, opts.split), key=lambda t: str(t.id))
    random.Random(f"tau2|{world.name}|{cfg.seed}").shuffle(pool)
    tests = _test_grams(world.domain) if opts.split == "train" else []
    for t2 in pool:
        if len(result.tasks) >= cfg.n_tasks:
            break
        grams = char_ngrams(tau2_task_text(t2), SIM_NGRAM)
        if any(jaccard(grams, g) >= opts.max_test_similarity for g in tests):
            result.drops["near_test"] += 1  # τ²'s own splits overlap: keep its test set unseen
            continue
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
