"""Rollout throughput on the embedded CPU model: micro-batched generation vs one request
at a time (the baseline), on the same tasks in the same run; plus the agent loop's own
overhead with a scripted policy (no model time).

    .venv/bin/python bench/rollout_throughput.py [--quick]

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import time

from data.records import Sampling
from envs.registry import get_world
from rollout.collector import ModelConfig, RolloutConfig, collect
from rollout.embedded import EmbeddedModel, prepare_embedded_model
from synthesis.base import SynthesisConfig, get_method


def measure(tasks, cfg: RolloutConfig, model=None) -> dict:
    t0 = time.perf_counter()
    trajs = collect(tasks, cfg, model_for=(lambda task: model) if model is not None else None)
    wall = time.perf_counter() - t0
    tokens = sum(t.usage.completion_tokens for t in trajs)
    calls = sum(t.usage.model_calls for t in trajs)
    return {"episodes": len(trajs), "model_calls": calls, "completion_tokens": tokens, "wall_s": round(wall, 2),
            "tokens_per_s": round(tokens / wall, 2), "episodes_per_s": round(len(trajs) / wall, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a few minutes: fewer tasks, shorter replies")
    args = ap.parse_args()
    n_tasks, trials, max_tokens = (4, 2, 48) if args.quick else (8, 2, 128)
    tasks = get_method("logic_driven")(SynthesisConfig(n_tasks=n_tasks, seed=1), get_world("airline")).tasks
    prepare_embedded_model()
    sampling = Sampling(temperature=0.7, max_tokens=max_tokens, seed=0)
    cfg = RolloutConfig(trials=trials, concurrency=64, sampling=sampling)
    # Warm the model once so neither arm pays the load.
    batched = EmbeddedModel(max_batch=8)
    measure(tasks[:1], cfg.model_copy(update={"trials": 1}), batched)
    single = EmbeddedModel(max_batch=1)
    measure(tasks[:1], cfg.model_copy(update={"trials": 1}), single)
    baseline = measure(tasks, cfg, single)
    candidate = measure(tasks, cfg, batched)
    scripted_cfg = RolloutConfig(model=ModelConfig(kind="scripted", options={"noise": 0.3}), trials=8, concurrency=64)
    loop = measure(tasks, scripted_cfg)
    figures = {
        "bench": "rollout_throughput", "quick": args.quick, "tasks": len(tasks), "trials": trials,
        "max_tokens": max_tokens,
        "baseline_batch1": baseline, "microbatched_batch8": candidate,
        "speedup_tokens_per_s": round(candidate["tokens_per_s"] / max(baseline["tokens_per_s"], 1e-9), 2),
        "mean_batch_size": round(sum(batched.batch_sizes) / max(1, len(batched.batch_sizes)), 2),
        "scripted_agent_loop": loop,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
