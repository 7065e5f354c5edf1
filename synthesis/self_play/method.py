"""The registered `self_play` synthesis method: sampled specs → a generator's outputs →
parsed, valid, grounded in the world, optionally filtered by a solver → conversations a
user can have (`coherence.as_conversation`: one user's records, their identity, their
words, a reference dialogue that tells them the answer) → `Task`s."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from data.records import StateRef
from data.self_play import Candidate, Generation, ParseError, Solve
from envs.world import World
from rollout.generation import (
    is_placeholder,
    parse_generation,
    r_format,
    r_valid,
    solver_pass_rate,
    validity,
)
from synthesis.base import SynthesisConfig, SynthesisResult, register
from synthesis.dialogue_checks import is_trivial
from synthesis.self_play.coherence import CALCULATE, as_conversation
from synthesis.self_play.generators import Generator, ModelGenerator, ScriptedGenerator
from synthesis.self_play.prompts import sample_spec
from synthesis.self_play.selection import char_ngrams, jaccard
from synthesis.self_play.world_check import WorldCheck, validate_on_world

METHOD = "self_play"


class SelfPlayOptions(BaseModel):
    """Options of self-play synthesis (see `synthesize_with` and `synthesize`)."""

    model_config = ConfigDict(extra="forbid")

    generator: Literal["scripted", "model"] = "scripted"
    model: dict[str, Any] = Field(default_factory=dict)  # a ModelConfig, for generator: model
    temperature: float = Field(1.0, ge=0)
    max_tokens: int = Field(768, ge=1)
    concurrency: int = Field(8, ge=1)
    batch_size: int = Field(8, ge=1)  # specs sampled per generator call
    max_attempts: int | None = Field(None, ge=0)  # candidates tried at most (default 4·n + 8)
    filter_k: int = Field(10, ge=1)  # solver answers per candidate in the filter
    min_agreement: float = Field(0.2, ge=0, le=1)
    dedup_threshold: float | None = Field(None, ge=0, le=1)  # Jaccard distance; None: no dedup
    # at most this share of n_tasks may be questions for the calculator alone
    max_calculator_share: float = Field(0.1, ge=0, le=1)
    # at most this share of n_tasks may be trivial: no write and at most one call of its own
    # (`synthesis.dialogue_checks.is_trivial`: one lookup and its answer); questions for the
    # calculator alone count under max_calculator_share instead
    max_trivial_share: float = Field(0.1, ge=0, le=1)
    # Share of specs that target a write tool no accepted task has yet (issue 16 §2: every
    # write tool is some task's target); 0: tools drawn uniformly.
    cover_write_tools: float = Field(0.5, ge=0, le=1)


def _drop_reason(text: str | None, world: World, ref: StateRef) -> tuple[str, Generation | None, WorldCheck | None]:
    """("", generation, check) for a candidate passing format, validity and the world, else a reason."""
    if text is None:
        return "no_generation", None, None
    gen = parse_generation(text)
    if isinstance(gen, ParseError):
        return f"format_{gen.reason}", None, None
    if is_placeholder(gen.question):
        return "placeholder_question", None, None
    v = validity(gen)
    if not v.in_menu:
        return "gold_not_in_menu", None, None
    if not v.required:
        return "missing_required_args", None, None
    if not v.grounded:
        return "ungrounded_value", None, None
    check = validate_on_world(world, gen, ref=ref)
    if not check.ok:
        return f"world_{check.reason}", None, None
    return "", gen, check


def synthesize_with(cfg: SynthesisConfig, world: World, generator: Generator, solve: Solve | None = None
                    ) -> SynthesisResult:
    """Self-play synthesis with a given generator (and, optionally, a solver for the filter).

    Specs are sampled in batches (`options.batch_size`, 8) until `n_tasks` tasks are emitted
    or `options.max_attempts` (4·n + 8) candidates were tried. A candidate becomes a task
    only if it parses, its question is no placeholder, r_valid is 1 and its gold calls run on
    the base state (seed, scale); with `solve`, also if the solver agrees on ≥
    `options.min_agreement` (0.2) of `options.filter_k` (10) answers. `options.dedup_threshold`
    (off by default) drops near-duplicate questions. A kept candidate then becomes a
    conversation (`coherence.as_conversation`; its drops: cross_user, no_identity,
    internal_id_leak, asks_about_past, answer_not_in_result, nothing_to_tell, reference_dialogue_fails:...),
    and questions for the calculator alone are kept up to `options.max_calculator_share`
    (0.1) of `n_tasks` (calculator_cap), other trivial tasks (no write, at most one call of
    their own, `dialogue_checks.is_trivial`) up to `options.max_trivial_share` (0.1 of `n_tasks`, rounded up; trivial_cap).
    Every drop is counted by reason.
    """
    opts: SelfPlayOptions = cfg.method_options()
    rng = random.Random(cfg.seed)
    ref = world.state_ref(cfg.seed, cfg.scale)
    conn = world.build_state(cfg.seed, cfg.scale)
    batch = opts.batch_size
    max_attempts = opts.max_attempts if opts.max_attempts is not None else 4 * cfg.n_tasks + 8
    k, min_agree = opts.filter_k, opts.min_agreement
    dedup_threshold = opts.dedup_threshold
    result = SynthesisResult()
    leaders: list[frozenset[str]] = []
    attempted = 0
    max_calculator = math.floor(opts.max_calculator_share * cfg.n_tasks + 1e-9)
    calculator = 0
    max_trivial = math.ceil(opts.max_trivial_share * cfg.n_tasks - 1e-9)  # one at least, unless 0
    trivial = 0
    notes = getattr(generator, "notes", None)
    try:
        while len(result.tasks) < cfg.n_tasks and attempted < max_attempts:
            covered = {c.name for t in result.tasks for c in t.reference_solution}
            uncovered = sorted(t for t, spec in world.tools.items() if spec.write and t not in covered)
            specs = [sample_spec(world, rng, first=rng.choice(uncovered)
                                 if uncovered and rng.random() < opts.cover_write_tools else None)
                     for _ in range(min(batch, max_attempts - attempted))]
            for spec, text in zip(specs, generator(specs, conn, rng), strict=True):
                attempted += 1
                note = notes.pop(text, None) if isinstance(notes, dict) and text is not None else None
                reason, gen, check = _drop_reason(text, world, ref)
                if gen is None or check is None:
                    result.drops[reason] += 1
                    continue
                calculator_only = all(c.name == CALCULATE for c in gen.calls)
                if calculator_only and calculator >= max_calculator:
                    result.drops["calculator_cap"] += 1
                    continue
                cand = Candidate(spec=spec, generation=gen)
                if solve is not None:
                    cand = replace(cand, p_hat=solver_pass_rate(cand, solve(cand, k)))
                    if cand.p_hat is not None and cand.p_hat < min_agree:
                        result.drops["low_agreement"] += 1
                        continue
                if dedup_threshold is not None:
                    grams = char_ngrams(gen.question)
                    if any(1 - jaccard(grams, lead) < float(dedup_threshold) for lead in leaders):
                        result.drops["near_duplicate"] += 1
                        continue
                    leaders.append(grams)
                task, why = as_conversation(world, gen, check, note, rng,
                                            _metadata(cand, generator_name=getattr(generator, "name", "custom")))
                if task is None:
                    result.drops[why] += 1
                    continue
                is_small = is_trivial(world, task) and not calculator_only  # those have their own cap
                if is_small and trivial >= max_trivial:
                    result.drops["trivial_cap"] += 1
                    continue
                if not result.keep(task, cfg.test_fraction):
                    continue
                calculator += calculator_only
                trivial += is_small
                if len(result.tasks) >= cfg.n_tasks:
                    break
    finally:
        conn.close()
    result.stats = {
        "generator": getattr(generator, "name", "custom"),
        "attempted": attempted,
        "emitted": len(result.tasks),
        "yield": round(len(result.tasks) / attempted, 3) if attempted else 0.0,
        "calls_per_task": {str(n): sum(len(t.metadata["gold_calls"]) == n for t in result.tasks) for n in (1, 2)},
        "tools": sorted({c["name"] for t in result.tasks for c in t.metadata["gold_calls"]}),
        "outcomes": dict(sorted(Counter(t.verification.outcome for t in result.tasks).items())),
        "trivial": trivial,
    }
    return result


def _metadata(cand: Candidate, generator_name: str) -> dict[str, Any]:
    """A candidate's self-play record: its spec, menu, validity and format, its generator."""
    gen = cand.generation
    metadata: dict[str, Any] = {
        "spec": {"world": cand.spec.world, "n_calls": cand.spec.n_calls, "tools": cand.spec.tools,
                 "menu": cand.spec.menu_names},
        "menu": gen.menu_names,
        "r_valid": r_valid(gen),
        "r_format": r_format(gen.raw) if gen.raw else 1.0,
        "generator": generator_name,
        "follows_spec": [c.name for c in gen.calls] == cand.spec.tools,
    }
    if cand.p_hat is not None:
        metadata["p_hat"] = cand.p_hat
    return metadata


def _supports(world: World) -> bool:
    return isinstance(world, World)  # any SQLite world: templates fall back to `generic_template`


@register(METHOD, options=SelfPlayOptions, supports=_supports)
def synthesize(cfg: SynthesisConfig, world: World) -> SynthesisResult:
    """Self-play tasks from the scripted generator (default; model-free templates over
    database records) or a model one (`options.generator: model`, from `options.model`)."""
    opts: SelfPlayOptions = cfg.method_options()
    if opts.generator == "scripted":
        generator: Generator = ScriptedGenerator(world)
    else:
        generator = ModelGenerator(model_cfg=dict(opts.model), temperature=opts.temperature,
                                   max_tokens=opts.max_tokens, concurrency=opts.concurrency)
    return synthesize_with(cfg, world, generator)
