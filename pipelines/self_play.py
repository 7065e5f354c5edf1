"""One round of the self-play loop (Tool-R0, methods.md §3), as plain Python.

    freeze solver → generator GRPO (reward r_format + r_valid + r_curr, with the frozen
    solver's pass rate p̂) → generate and filter candidates with the trained generator →
    curriculum: keep easy/medium/hard in the configured mix, within per-world quotas →
    release the round's tasks (lineage: the previous round's release) → solver GRPO on
    them (solver reward) → next round starts from both trained models.

The frozen solver is the embedded model on the CPU, or (`self_play.solver_server`) a
`vllm serve <solver checkpoint>` process that runs from the generator's GRPO step until
the generate/filter phase is done and is stopped before the solver's own GRPO step.
A round may write tasks for several worlds (`self_play.worlds`).
`pipelines.flows.self_play_flow` runs the rounds as a Prefect flow.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from data import store
from data.records import Task
from data.self_play import Candidate, Generation, Solve, Spec
from envs.registry import get_world
from pipelines.config import RunConfig, SelfPlayLoopConfig
from pipelines.stages import lineage, releases_dir
from rollout.embedded import EmbeddedModel
from synthesis.base import SynthesisConfig, SynthesisResult
from synthesis.self_play import (
    SOLVER_SYSTEM,
    ModelGenerator,
    ScriptedGenerator,
    chat_solver,
    curriculum,
    difficulty_band,
    generator_prompt,
    max_mix_size,
    sample_spec,
    synthesize_with,
    world_context,
)
from synthesis.self_play.coherence import gold_calls, solver_question
from train.grpo import grpo_steps
from train.rewards import make_generator_reward, solver_reward
from train.sft import resolve_model, step_logs

RELEASE = "selfplay_tasks"
BANDS = ("easy", "medium", "hard")


def _render(tokenizer: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]] | None = None) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=True)


def _counts(results: Sequence[SynthesisResult]) -> dict[str, int]:
    generated = sum(r.stats.get("attempted", 0) for r in results)
    kept = sum(len(r.tasks) for r in results)
    after_validity = kept + sum(r.drops.get(k, 0) for r in results for k in ("low_agreement", "near_duplicate",
                                                                               "duplicate"))
    return {"generated": generated, "valid": after_validity, "kept": kept}


def round_worlds(cfg: RunConfig) -> list[str]:
    """The worlds a round writes tasks for: `self_play.worlds`, else `synthesis.world`."""
    names = list(cfg.self_play.worlds) or [cfg.synthesis.world]
    for name in names:
        get_world(name)  # an unknown world is a clear error before any model loads
    return names


def _split(n: int, parts: int) -> list[int]:
    """n split over `parts` as evenly as possible, earlier parts first."""
    return [n // parts + (i < n % parts) for i in range(parts)]


# --------------------------------------------------------------------------- curriculum


def select_round(tasks: Sequence[Task], sp: SelfPlayLoopConfig) -> tuple[list[Task], dict[str, Any]]:
    """The round's curriculum (methods.md §3) over the kept candidates, which carry the
    filter's p̂ (`metadata["p_hat"]`): bands by `curriculum_bands`, picked in the
    `curriculum_mix` shares by `synthesis.self_play.curriculum` with `per_world_quota`.
    The size is `curriculum_size`, or the largest selection that keeps the mix exactly
    (`max_mix_size`). Tasks without p̂ are not selectable. Returns the picked tasks (easy,
    medium, hard order) and a report: candidates and picks per band and per world."""
    cands: list[Candidate] = []
    by_cand: dict[int, Task] = {}
    for t in tasks:
        if t.metadata.get("p_hat") is None:
            continue
        gold = gold_calls(t)
        spec = Spec(world=t.world, n_calls=len(gold), tools=[c.name for c in gold], menu=[])
        cand = Candidate(spec=spec, generation=Generation(question=solver_question(t), tools=[], calls=gold),
                         p_hat=float(t.metadata["p_hat"]))
        cands.append(cand)
        by_cand[id(cand)] = t
    bands = tuple(sp.curriculum_bands)
    available = Counter(difficulty_band(c.p_hat or 0.0, bands) for c in cands)  # type: ignore[arg-type]
    size = sp.curriculum_size if sp.curriculum_size is not None else max_mix_size(dict(available), sp.curriculum_mix)
    picked = curriculum(cands, size, mix=sp.curriculum_mix, per_world_quota=sp.per_world_quota,
                        bands=bands)  # type: ignore[arg-type]
    out = [by_cand[id(c)] for c in picked]
    for t in out:
        t.metadata["band"] = difficulty_band(float(t.metadata["p_hat"]), bands)  # type: ignore[arg-type]
    report = {
        "size": size,
        "candidates_by_band": {b: available.get(b, 0) for b in BANDS},
        "by_band": {b: sum(t.metadata["band"] == b for t in out) for b in BANDS},
        "by_world": dict(Counter(t.world for t in out)),
        "not_selected": len(cands) - len(out),
        "mix": list(sp.curriculum_mix),
        "bands": list(bands),
    }
    return out, report


# --------------------------------------------------------------------------- the frozen solver


@contextlib.contextmanager
def frozen_solver(sp: SelfPlayLoopConfig, solver_model: str, seed: int, root: Path) -> Iterator[tuple[Solve, dict]]:
    """The round's frozen solver as a `Solve`, and a note of how it is served.

    CPU (default): the embedded backend on the solver checkpoint. With
    `sp.solver_server`: `vllm serve <solver checkpoint>` (`rollout.vllm_server`), and the
    solver's OpenAI-compatible client points at it; the server is stopped on exit."""
    checkpoint = Path(resolve_model(solver_model))
    serve = sp.solver_server
    if serve is None:
        frozen = EmbeddedModel(model_dir=checkpoint, max_batch=8)
        try:
            yield chat_solver(frozen, temperature=0.7, max_tokens=sp.solver_max_tokens, seed=seed), {"kind": "embedded"}
        finally:
            asyncio.run(frozen.aclose())
        return
    from rollout.openai_client import OpenAICompatibleModel
    from rollout.vllm_server import VLLMServer

    server_cfg = serve.server.model_copy(update={"model": str(checkpoint)})
    root.mkdir(parents=True, exist_ok=True)
    server = VLLMServer(server_cfg, startup_timeout_s=serve.startup_timeout_s, log_path=root / "solver-vllm.log")
    server.start()
    name = server_cfg.served_name()

    def client() -> OpenAICompatibleModel:
        return OpenAICompatibleModel(base_url=server.base_url, model=name, api_key=server_cfg.api_key or "EMPTY",
                                     timeout_s=serve.timeout_s, max_in_flight=serve.max_in_flight)

    try:
        yield (chat_solver(client, temperature=0.7, max_tokens=sp.solver_max_tokens, seed=seed),
               {"kind": "vllm", "base_url": server.base_url, "model": name, "checkpoint": str(checkpoint)})
    finally:
        server.stop()


# --------------------------------------------------------------------------- the round


def self_play_round(cfg: RunConfig, out: Path, round_index: int, generator_model: str, solver_model: str,
                    parent: str | None, run_id: str = "") -> dict[str, Any]:
    """Run one round; returns paths of the trained models and the round's release, and counts."""
    sp = cfg.self_play
    worlds = [get_world(n) for n in round_worlds(cfg)]
    seed = cfg.synthesis.seed + 1000 * round_index
    rng = random.Random(seed)
    root = Path(out) / "self_play" / f"round-{round_index}"
    with frozen_solver(sp, solver_model, seed, root) as (solve, solver_info):
        # 1. generator GRPO against the frozen solver (specs spread over the worlds)
        specs, contexts = [], []
        conns = {w.name: w.build_state(seed, cfg.synthesis.scale) for w in worlds}
        try:
            for i in range(sp.generator_prompts):
                w = worlds[i % len(worlds)]
                specs.append(sample_spec(w, rng))
                contexts.append(world_context(conns[w.name], rng))
        finally:
            for conn in conns.values():
                conn.close()

        def generator_rows(tokenizer: Any) -> Any:
            from datasets import Dataset

            return Dataset.from_list([{"prompt": _render(tokenizer, generator_prompt(s, c)),
                                       "spec": json.dumps(s.to_dict())} for s, c in zip(specs, contexts, strict=True)])

        gen_cfg = sp.generator.model_copy(update={"model": generator_model})
        reward = make_generator_reward(solve, judge=None, k=sp.k_reward)
        gen_trainer, _, _, gen_final, _ = grpo_steps(generator_rows, [reward], gen_cfg, root / "generator")

        # 2. generate with the trained generator and filter with the frozen solver, per world
        model_gen = ModelGenerator(model_cfg={"kind": "embedded", "path": str(gen_final)},
                                   max_tokens=sp.generator_max_tokens)
        results: list[SynthesisResult] = []
        for w, n in zip(worlds, _split(sp.n_candidates, len(worlds)), strict=True):
            if n == 0:
                continue
            scfg = SynthesisConfig(method="self_play", world=w.name, n_tasks=n, seed=seed, scale=cfg.synthesis.scale,
                                   options={"filter_k": sp.k_filter, "min_agreement": sp.min_agreement,
                                            "max_attempts": n, "batch_size": n})
            results.append(synthesize_with(scfg, w, model_gen, solve=solve))
    # the solver server (if any) is stopped here, before the solver's GRPO step
    counts = _counts(results)
    kept = [t for r in results for t in r.tasks]
    tasks, curriculum_report = select_round(kept, sp)
    topped_up = 0
    if len(tasks) < sp.min_solver_tasks:
        missing = sp.min_solver_tasks - len(tasks)
        for w, n in zip(worlds, _split(missing, len(worlds)), strict=True):
            if n == 0:
                continue
            scfg = SynthesisConfig(method="self_play", world=w.name, n_tasks=n, seed=seed, scale=cfg.synthesis.scale)
            extra = synthesize_with(scfg, w, ScriptedGenerator(w))
            topped_up += len(extra.tasks)
            tasks += extra.tasks
    drops = {f"model_generator:{k}": v for r in results for k, v in r.drops.items()}
    stats = {"round": round_index, "counts": counts, "curriculum": curriculum_report, "scripted_top_up": topped_up,
             "drops": drops, "worlds": [w.name for w in worlds], "solver": solver_info,
             "generator_rewards": step_logs(gen_trainer.state.log_history, "reward")}
    release = store.write_records(releases_dir(out), RELEASE, "tasks", tasks,
                                  lineage(cfg, [parent] if parent else [], run_id), stats=stats)

    # 3. solver GRPO on the round's tasks
    def solver_rows(tokenizer: Any) -> Any:
        from datasets import Dataset

        rows = []
        for t in tasks:
            world = get_world(t.world)
            menu = [world.tools[n].schema() for n in t.metadata.get("menu", []) if n in world.tools]
            messages = [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": solver_question(t)}]
            rows.append({"prompt": _render(tokenizer, messages, menu or world.tool_schemas()),
                         "gold": json.dumps([c.model_dump(exclude={"id"}) for c in gold_calls(t)])})
        return Dataset.from_list(rows)

    solver_cfg = sp.solver.model_copy(update={"model": solver_model})
    solver_trainer, _, _, solver_final, _ = grpo_steps(solver_rows, [solver_reward], solver_cfg, root / "solver")
    summary = {
        "round": round_index,
        "generator": str(gen_final),
        "solver": str(solver_final),
        "release": str(release),
        "counts": counts,
        "curriculum": curriculum_report,
        "bands": curriculum_report["by_band"],
        "scripted_top_up": topped_up,
        "tasks": len(tasks),
        "worlds": [w.name for w in worlds],
        "frozen_solver": solver_info,
        "generator_rewards": stats["generator_rewards"],
        "solver_rewards": step_logs(solver_trainer.state.log_history, "reward"),
    }
    (root / "round_summary.json").write_text(json.dumps(summary, indent=2))
    return summary
