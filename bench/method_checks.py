"""Small-scale checks of the constraint-guided (CoVe) and self-play (Tool-R0) methods.

    .venv/bin/python bench/method_checks.py [--quick]

Figures (methods.md §2, §3):
- `fuzzy_unique_rate`: share of fuzzified descriptions that match exactly one database
  record (must be 1.0), re-checked against the rebuilt initial state of every task, over
  every world with CoVe hooks (`cove_per_world` has each world's figures, with the
  first-draw uniqueness as the baseline the redraw ladder improves on);
- `cove_case_accuracy`: agreement of V(τ, C) with the expected verdict on the unit cases
  (gold, reordered/skipped reads pass; wrong item/target/payment/amount, extra write
  fail), over the same worlds;
- `self_play_per_world`: scripted self-play yield per tool-use world with the world's
  templates against the generic-template baseline (same seeds and specs);
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
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.self_play_stubs import (  # noqa: E402
    bandpass_curve,
    expected_r_diff,
    grounding_rejection_rate,
    plant_hallucination,
)
from envs.constraints import world_constraints  # noqa: E402
from envs.registry import get_world, list_worlds  # noqa: E402
from rollout.generation import parse_generation  # noqa: E402
from synthesis.base import SynthesisConfig, get_method  # noqa: E402
from synthesis.constraint_guided import recheck_unique  # noqa: E402
from synthesis.self_play import (  # noqa: E402
    ScriptedGenerator,
    generic_template,
    sample_spec,
    synthesize_with,
    validate_on_world,
)
from verifiers.audit import audit_cases  # noqa: E402


def cove_worlds() -> list[str]:
    """The registered worlds that have CoVe hooks (a ``constraints.py``)."""
    out = []
    for name in list_worlds():
        try:
            world_constraints(get_world(name))
        except (LookupError, AttributeError, TypeError):
            continue
        out.append(name)
    return out


def cove(n: int, world_name: str = "airline") -> dict:
    world = get_world(world_name)
    t0 = time.perf_counter()
    result = get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", world=world_name, n_tasks=n,
                                                             seed=100), world)
    checks = [recheck_unique(world, task) for task in result.tasks]
    unique, total = sum(u for u, _ in checks), sum(n for _, n in checks)
    cases = [c.expected_pass == c.got_pass for t in result.tasks
             for c in audit_cases(t, "constraint_satisfaction")]
    return {
        "tasks": len(result.tasks),
        "descriptions": total,
        "unique": unique,
        "fuzzy_unique_rate": unique / total if total else 0.0,
        "fuzzy_unique_rate_reported": result.stats.get("fuzzy_unique_rate"),
        "fuzzy_first_draw_unique_rate": result.stats.get("fuzzy_first_draw_unique_rate"),  # baseline: no redraws
        "cases": len(cases),
        "cases_agreeing": sum(cases),
        "cove_case_accuracy": sum(cases) / len(cases) if cases else 0.0,
        "constraint_kinds": result.stats.get("constraint_kinds"),
        "drops": dict(result.drops),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def self_play_yield(world_name: str, n: int) -> dict:
    """Scripted self-play with the world's templates vs the generic-template baseline."""
    world = get_world(world_name)
    out: dict = {}
    for label in ("templates", "generic"):
        gen = ScriptedGenerator(world)
        if label == "generic":
            gen.templates = {name: generic_template(spec) for name, spec in world.tools.items()}
        cfg = SynthesisConfig(method="self_play", world=world_name, n_tasks=n, seed=7,
                              options={"max_attempts": 2 * n})
        t0 = time.perf_counter()
        r = synthesize_with(cfg, world, gen)
        writes = {name for name, spec in world.tools.items() if spec.write}
        out[label] = {"tasks": len(r.tasks), "attempted": r.stats["attempted"], "yield": r.stats["yield"],
                      "tools_covered": len(r.stats["tools"]), "tools": len(world.tools),
                      "write_tools_covered": len(writes & set(r.stats["tools"])), "write_tools": len(writes),
                      "drops": dict(r.drops), "seconds": round(time.perf_counter() - t0, 2)}
    return out


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
    n_tasks, n_gen, n_cand, n_sp = (12, 100, 300, 40) if args.quick else (40, 500, 2000, 200)
    qs = [round(0.1 * i, 1) for i in range(11)]
    figures = {"bench": "method_checks", "quick": args.quick}
    per_world = {name: cove(n_tasks, name) for name in cove_worlds()}
    for name, c in per_world.items():
        print(f"cove {name}: {c['tasks']} tasks, unique {c['unique']}/{c['descriptions']}"
              f" (first draw {c['fuzzy_first_draw_unique_rate']}), cases {c['cases_agreeing']}/{c['cases']}"
              f" in {c['seconds']} s")
    sp_worlds = {name: self_play_yield(name, n_sp) for name in per_world}
    for name, y in sp_worlds.items():
        print(f"self-play {name}: yield {y['templates']['yield']} with templates vs {y['generic']['yield']} generic;"
              f" write tools {y['templates']['write_tools_covered']}/{y['templates']['write_tools']} vs"
              f" {y['generic']['write_tools_covered']}")
    g = grounding(n_gen)
    curve = bandpass_curve(qs, n_cand, k=8, rng=random.Random(0))
    descriptions = sum(c["descriptions"] for c in per_world.values())
    cases = sum(c["cases"] for c in per_world.values())
    figures.update(
        fuzzy_unique_rate=sum(c["unique"] for c in per_world.values()) / descriptions if descriptions else 0.0,
        cove_case_accuracy=sum(c["cases_agreeing"] for c in per_world.values()) / cases if cases else 0.0,
        grounding_rejection_rate=g["grounding_rejection_rate"],
        bandpass=[[q, round(v, 4)] for q, v in curve],
        bandpass_expected=[[q, round(expected_r_diff(q, 8), 4)] for q in qs],
        cove=per_world.get("airline", {}),
        cove_worlds=sorted(per_world),
        cove_per_world={name: {k: c[k] for k in ("tasks", "descriptions", "fuzzy_unique_rate",
                                                 "fuzzy_first_draw_unique_rate", "cove_case_accuracy", "cases",
                                                 "constraint_kinds", "seconds")} for name, c in per_world.items()},
        self_play_per_world=sp_worlds,
        grounding=g,
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
