"""One round of the self-play loop (Tool-R0, methods.md §3), as plain Python.

    freeze solver → generator GRPO (reward r_format + r_valid + r_curr, with the frozen
    solver's pass rate p̂) → generate and filter candidates with the trained generator →
    release the round's tasks (lineage: the previous round's release) → solver GRPO on
    them (solver reward) → next round starts from both trained models.

`pipelines.flows.self_play_flow` runs the rounds as a Prefect flow.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

from data import store
from data.records import Task
from envs.registry import get_world
from pipelines.config import RunConfig
from pipelines.stages import lineage, releases_dir
from rollout.embedded import EmbeddedModel
from synthesis.base import SynthesisConfig
from synthesis.self_play import (
    SOLVER_SYSTEM,
    ModelGenerator,
    ScriptedGenerator,
    chat_solver,
    generator_prompt,
    make_generator_reward,
    sample_spec,
    solver_reward,
    synthesize_with,
    world_context,
)
from train.grpo import grpo_steps
from train.sft import resolve_model, step_logs

RELEASE = "selfplay_tasks"


def _render(tokenizer: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]] | None = None) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=True)


def _counts(result: Any) -> dict[str, int]:
    generated = result.stats.get("attempted", 0)
    after_validity = len(result.tasks) + sum(result.drops.get(k, 0) for k in ("low_agreement", "near_duplicate", "duplicate"))
    return {"generated": generated, "valid": after_validity, "kept": len(result.tasks)}


def self_play_round(cfg: RunConfig, out: Path, round_index: int, generator_model: str, solver_model: str,
                    parent: str | None, run_id: str = "") -> dict[str, Any]:
    """Run one round; returns paths of the trained models and the round's release, and counts."""
    sp = cfg.self_play
    world = get_world(cfg.synthesis.world)
    seed = cfg.synthesis.seed + 1000 * round_index
    rng = random.Random(seed)
    root = Path(out) / "self_play" / f"round-{round_index}"
    frozen = EmbeddedModel(model_dir=Path(resolve_model(solver_model)), max_batch=8)
    solve = chat_solver(frozen, temperature=0.7, max_tokens=sp.solver_max_tokens, seed=seed)
    try:
        # 1. generator GRPO against the frozen solver
        conn = world.build_state(seed, cfg.synthesis.scale)
        specs = [sample_spec(world, rng) for _ in range(sp.generator_prompts)]
        contexts = [world_context(conn, rng) for _ in specs]
        conn.close()

        def generator_rows(tokenizer: Any) -> Any:
            from datasets import Dataset

            return Dataset.from_list([{"prompt": _render(tokenizer, generator_prompt(s, c)),
                                       "spec": json.dumps(s.to_dict())} for s, c in zip(specs, contexts, strict=True)])

        gen_cfg = sp.generator.model_copy(update={"model": generator_model})
        reward = make_generator_reward(solve, judge=None, k=sp.k_reward)
        gen_trainer, _, _, gen_final, _ = grpo_steps(generator_rows, [reward], gen_cfg, root / "generator")

        # 2. generate with the trained generator and filter with the frozen solver
        scfg = SynthesisConfig(method="self_play", world=world.name, n_tasks=sp.n_candidates, seed=seed,
                               scale=cfg.synthesis.scale, options={
                                   "filter_k": sp.k_filter, "min_agreement": sp.min_agreement,
                                   "max_attempts": sp.n_candidates, "batch_size": sp.n_candidates})
        model_gen = ModelGenerator(model_cfg={"kind": "embedded", "path": str(gen_final)},
                                   max_tokens=sp.generator_max_tokens)
        generated = synthesize_with(scfg, world, model_gen, solve=solve)
        counts = _counts(generated)
        tasks: list[Task] = list(generated.tasks)
        topped_up = 0
        if len(tasks) < sp.min_solver_tasks:
            extra = synthesize_with(scfg.model_copy(update={"n_tasks": sp.min_solver_tasks - len(tasks)}),
                                    world, ScriptedGenerator(world))
            topped_up = len(extra.tasks)
            tasks += extra.tasks
        drops = {f"model_generator:{k}": v for k, v in generated.drops.items()}
        stats = {"round": round_index, "counts": counts, "scripted_top_up": topped_up, "drops": drops,
                 "generator_rewards": step_logs(gen_trainer.state.log_history, "reward")}
        release = store.write_records(releases_dir(out), RELEASE, "tasks", tasks,
                                      lineage(cfg, [parent] if parent else [], run_id), stats=stats)
    finally:
        asyncio.run(frozen.aclose())

    # 3. solver GRPO on the round's tasks
    def solver_rows(tokenizer: Any) -> Any:
        from datasets import Dataset

        rows = []
        for t in tasks:
            menu = [world.tools[n].schema() for n in t.metadata.get("menu", []) if n in world.tools]
            messages = [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": t.instruction}]
            rows.append({"prompt": _render(tokenizer, messages, menu or world.tool_schemas()),
                         "gold": json.dumps([c.model_dump(exclude={"id"}) for c in t.reference_solution])})
        return Dataset.from_list(rows)

    solver_cfg = sp.solver.model_copy(update={"model": solver_model})
    solver_trainer, _, _, solver_final, _ = grpo_steps(solver_rows, [solver_reward], solver_cfg, root / "solver")
    summary = {
        "round": round_index,
        "generator": str(gen_final),
        "solver": str(solver_final),
        "release": str(release),
        "counts": counts,
        "scripted_top_up": topped_up,
        "tasks": len(tasks),
        "generator_rewards": stats["generator_rewards"],
        "solver_rewards": step_logs(solver_trainer.state.log_history, "reward"),
    }
    (root / "round_summary.json").write_text(json.dumps(summary, indent=2))
    return summary
