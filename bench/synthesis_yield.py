"""Synthesis yield per tool-use world (LOGIGEN small-scale check, methods.md §1).

For every registered SQLite world (workspace worlds such as "terminal" are skipped), plus
the library domain compiled by the Architect from its recorded replies:

- yield: verified tasks / attempted boundary states (logic-driven synthesis), and the
  dropped states by reason (`drop_reasons`);
- rule-crossing share: tasks whose reference path crosses a compiled rule
  (`task.metadata["rules_crossed"]`), and rule coverage (rules crossed by some task /
  compiled rules);
- tasks synthesized per second per core (one process, one thread);
- probe rejection rate: violating probes rejected with exactly their rule id (the world's
  own `probes.py`).

Baseline, measured in the same run: the same synthesis with the Set Designer's patches
removed (the seeded state, same focus), which shows what boundary-adjacent states add.

    python bench/synthesis_yield.py --quick

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs.probes import ProbeSet, load_probes, run_probes  # noqa: E402
from envs.registry import get_world, list_worlds, register_world  # noqa: E402
from envs.world import World  # noqa: E402
from synthesis.architect import ReplayModel, compile_domain  # noqa: E402
from synthesis.base import SynthesisConfig, get_method  # noqa: E402


def tool_use_worlds() -> list[str]:
    out = []
    for name in list_worlds():
        try:
            w = get_world(name)
        except Exception as exc:  # a world that does not load is reported, not fatal
            print(f"skip {name}: {exc}", file=sys.stderr)
            continue
        if isinstance(w, World) and (w.folder / "schema.sql").exists():
            out.append(name)
    return out


def probes_for(world: World) -> tuple[ProbeSet | None, str]:
    own = load_probes(world)
    return (own, "probes.py") if own is not None else (None, "none")


class _NoPatches:
    """The world's design hooks with the Set Designer's patches dropped (the baseline)."""

    def __init__(self, design: Any) -> None:
        self._design = design

    def __getattr__(self, name: str) -> Any:
        return getattr(self._design, name)

    def variants(self, conn: Any, rng: Any, n: int) -> list[Any]:
        return [replace(v, patches=[]) for v in self._design.variants(conn, rng, n)]

    # Without its patches a focus may name records that do not exist: the hooks may then
    # fail, which counts as a state with no describable goal (a drop), not a crash.
    def candidate_calls(self, conn: Any, focus: Any) -> list[Any]:
        try:
            return list(self._design.candidate_calls(conn, focus))
        except (LookupError, TypeError, ValueError, IndexError):
            return []

    def describe(self, *args: Any) -> Any:
        try:
            return self._design.describe(*args)
        except (LookupError, TypeError, ValueError, IndexError):
            return None


def synth(world: World, n_tasks: int, seeds: list[int], baseline: bool) -> dict[str, Any]:
    original = world.design
    if baseline:
        world.__dict__["design"] = _NoPatches(original)
    try:
        tasks, attempted, drops = [], 0, Counter()
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        for seed in seeds:
            res = get_method("logic_driven")(SynthesisConfig(world=world.name, n_tasks=n_tasks, seed=seed), world)
            tasks += res.tasks
            attempted += res.stats["attempted"]
            drops.update(res.drops)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    finally:
        world.__dict__["design"] = original
    compiled = world.compiled_rules()
    crossed = {r for t in tasks for r in t.metadata.get("rules_crossed", [])}
    return {
        "tasks": len(tasks), "attempted": attempted, "drops": sum(drops.values()),
        "drop_reasons": dict(sorted(drops.items())),
        "yield": round(len(tasks) / attempted, 3) if attempted else 0.0,
        "rule_crossing_share": round(sum(bool(t.metadata.get("rules_crossed")) for t in tasks) / len(tasks), 3)
        if tasks else 0.0,
        "rule_coverage": round(len(crossed & set(compiled)) / len(compiled), 3) if compiled else 0.0,
        "rules_crossed": sorted(crossed),
        "wall_s": round(wall, 2),
        "tasks_per_s_per_core": round(len(tasks) / max(cpu, 1e-9), 2),  # one thread: CPU time = one core
    }


def compile_library(tmp: Path) -> str:
    fixture = json.loads((ROOT / "tests/fixtures/architect/library.json").read_text())
    result = compile_domain(ReplayModel(fixture["replies"]), "library", fixture["policy"], tmp / "library")
    register_world("library", result.folder)
    return f"library (Architect, {result.rounds} check rounds)"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="6 tasks x 1 seed per world")
    ap.add_argument("--n-tasks", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds per world")
    ap.add_argument("--no-architect", action="store_true", help="skip the compiled library domain")
    args = ap.parse_args(argv)
    n_tasks = args.n_tasks or (6 if args.quick else 14)
    seeds = list(range(100, 100 + (args.seeds or (1 if args.quick else 3))))
    if n_tasks < 1 or not seeds:
        ap.error("--n-tasks and --seeds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-synthesis-yield-") as tmp:
        extra = None if args.no_architect else compile_library(Path(tmp))
        worlds: dict[str, Any] = {}
        for name in tool_use_worlds():
            world = get_world(name)
            assert isinstance(world, World)
            probes, source = probes_for(world)
            report = run_probes(world, probes) if probes else None
            row = synth(world, n_tasks, seeds, baseline=False)
            base = synth(world, n_tasks, seeds, baseline=True)
            row.update({
                "compiled_rules": len(world.compiled_rules()),
                "probe_source": source,
                "probes": len(report.results) if report else 0,
                "probe_rejection_rate": round(report.rejection_rate, 3) if report else None,
                "probe_valid_rate": round(report.valid_rate, 3) if report else None,
                "rules_without_probe": report.uncovered if report else world.compiled_rules(),
                "baseline_no_set_designer": {k: base[k] for k in ("tasks", "attempted", "yield",
                                                                  "rule_crossing_share", "rule_coverage")},
            })
            worlds[name] = row
            print(f"{name:10s} yield {row['yield']:.2f} (baseline {base['yield']:.2f})  crossing "
                  f"{row['rule_crossing_share']:.2f} (baseline {base['rule_crossing_share']:.2f})  coverage "
                  f"{row['rule_coverage']:.2f}  {row['tasks_per_s_per_core']:.1f} tasks/s/core  probes "
                  f"{row['probe_rejection_rate']} ({source})", file=sys.stderr)
    tasks = sum(w["tasks"] for w in worlds.values())
    attempted = sum(w["attempted"] for w in worlds.values())
    probed = [w for w in worlds.values() if w["probes"]]
    crossing_tasks = sum(w["rule_crossing_share"] * w["tasks"] for w in worlds.values())
    cpu_s = sum(w["tasks"] / w["tasks_per_s_per_core"] for w in worlds.values() if w["tasks_per_s_per_core"])
    b_tasks = sum(w["baseline_no_set_designer"]["tasks"] for w in worlds.values())
    b_att = sum(w["baseline_no_set_designer"]["attempted"] for w in worlds.values())
    b_cross = sum(w["baseline_no_set_designer"]["rule_crossing_share"] * w["baseline_no_set_designer"]["tasks"]
                  for w in worlds.values())
    out = {
        "yield": round(tasks / attempted, 3) if attempted else 0.0,
        "rule_crossing_share": round(crossing_tasks / tasks, 3) if tasks else 0.0,
        "tasks_per_s_per_core": round(tasks / cpu_s, 2) if cpu_s else 0.0,
        "probe_rejection_rate": round(sum(w["probe_rejection_rate"] * w["probes"] for w in probed)
                                      / sum(w["probes"] for w in probed), 3) if probed else 0.0,
        "probe_rejection_rate_min_world": min((w["probe_rejection_rate"] for w in probed), default=0.0),
        "worlds_without_probes": sorted(n for n, w in worlds.items() if not w["probes"]),
        "baseline_no_set_designer": {
            "yield": round(b_tasks / b_att, 3) if b_att else 0.0,
            "rule_crossing_share": round(b_cross / b_tasks, 3) if b_tasks else 0.0,
        },
        "n_tasks_per_seed": n_tasks, "seeds": len(seeds), "architect_world": extra,
        "worlds": worlds,
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
