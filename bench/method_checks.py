"""Small-scale checks of the constraint-guided (CoVe) and self-play (Tool-R0) methods.

    .venv/bin/python bench/method_checks.py [--quick]

Figures (methods.md §2, §3):
- `fuzzy_unique_rate`: share of fuzzified descriptions that match exactly one database
  record (must be 1.0), re-checked against the rebuilt initial state of every task;
- `cove_case_accuracy`: agreement of V(τ, C) with the expected verdict on the unit cases
  (gold, reordered/skipped reads pass; wrong flight/cabin/payment/bags, extra write fail);
- `grounding_rejection_rate`: share of generations with a planted hallucinated argument
  value that the grounding rule of r_valid rejects (and, for comparison, the share that
  executing the gold calls on the world would catch);
- `bandpass`: [q, mean r_diff] for a stub solver answering right with probability q, next to
  the exact binomial expectation, so the curve can be checked.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from synthesis.constraint_guided import recheck_unique
from synthesis.self_play import (
    ScriptedGenerator,
    bandpass_curve,
    expected_r_diff,
    grounding_rejection_rate,
    parse_generation,
    plant_hallucination,
    sample_spec,
    validate_on_world,
)
from verifiers.constraints import case_accuracy


def cove(n: int) -> dict:
    world = get_world("airline")
    t0 = time.perf_counter()
    result = get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", n_tasks=n, seed=100), world)
    checks = [recheck_unique(world, task) for task in result.tasks]
    unique, total = sum(u for u, _ in checks), sum(n for _, n in checks)
    return {
        "tasks": len(result.tasks),
        "descriptions": total,
        "fuzzy_unique_rate": unique / total if total else 0.0,
        "fuzzy_unique_rate_reported": result.stats.get("fuzzy_unique_rate"),
        "cove_case_accuracy": case_accuracy(result.tasks),
        "drops": dict(result.drops),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def grounding(n: int) -> dict:
    world = get_world("airline")
    rng = random.Random(0)
    gen = ScriptedGenerator(world)
    conn = world.build_state(0, 30)
    clean, planted = [], []
    while len(clean) < n:
        text = gen.generate(sample_spec(world, rng), conn, rng)
        parsed = parse_generation(text) if text else None
        if parsed is None or not hasattr(parsed, "calls"):
            continue
        clean.append(parsed)
        planted.append(plant_hallucination(parsed, rng))
    caught_by_world = sum(not validate_on_world(world, g, 0, 30).ok for g in planted) / len(planted)
    return {
        "grounding_rejection_rate": grounding_rejection_rate(planted),
        "grounding_false_rejections_clean": grounding_rejection_rate(clean),
        "world_execution_rejection_rate": round(caught_by_world, 4),
        "generations": n,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer tasks and candidates (seconds)")
    args = ap.parse_args()
    n_tasks, n_gen, n_cand = (12, 100, 300) if args.quick else (40, 500, 2000)
    qs = [round(0.1 * i, 1) for i in range(11)]
    figures = {"bench": "method_checks", "quick": args.quick}
    c = cove(n_tasks)
    g = grounding(n_gen)
    curve = bandpass_curve(qs, n_cand, k=8, rng=random.Random(0))
    figures.update(
        fuzzy_unique_rate=c["fuzzy_unique_rate"],
        cove_case_accuracy=c["cove_case_accuracy"],
        grounding_rejection_rate=g["grounding_rejection_rate"],
        bandpass=[[q, round(v, 4)] for q, v in curve],
        bandpass_expected=[[q, round(expected_r_diff(q, 8), 4)] for q in qs],
        cove=c,
        grounding=g,
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
