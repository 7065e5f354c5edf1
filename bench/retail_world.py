"""The retail world against the airline world (the baseline), measured in the same run.

Arms, timed in CPU seconds of this thread (other processes on the machine do not count):

- `generator`: seeded generation at a large scale (rows, rows per CPU second);
- `synthesis`: logic-driven synthesis of the same number of tasks per world (CPU seconds
  per task, yield = emitted / attempted, compiled rules touched, boundary kinds, and the
  boundary-conflict rate: tasks whose boundary rule rejected a naive call during the
  search; a no-change or alternative goal is then the right answer).

    .venv/bin/python bench/retail_world.py [--quick]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from envs import state as st
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method

# The airline design keeps its kind -> rule map inline; the bench needs it for the conflict rate.
AIRLINE_RULES = {"seats": "R02_SEATS", "balance": "R04_BALANCE", "cancel": "R06_CANCEL_WINDOW",
                 "bags": "R10_BAG_LIMIT"}


def generator_arm(world: str, scale: int) -> dict[str, Any]:
    w = get_world(world)
    conn = w.empty_state()
    t0, w0 = time.process_time(), time.perf_counter()
    conn.execute("BEGIN")
    w.generator.generate(conn, seed=0, scale=scale)
    conn.execute("COMMIT")
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    rows = sum(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in st.tables(conn))
    conn.close()
    return {"scale": scale, "rows": rows, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "rows_per_cpu_s": round(rows / cpu)}


def synthesis_arm(world: str, n_tasks: int, seed: int) -> dict[str, Any]:
    w = get_world(world)
    t0 = time.process_time()
    result = get_method("logic_driven")(SynthesisConfig(world=world, n_tasks=n_tasks, seed=seed), w)
    cpu = time.process_time() - t0
    tasks = result.tasks
    rules = {r for t in tasks for r in t.metadata["rules"]} & set(w.compiled_rules())
    own = getattr(w.design, "RULE_OF", None) or {
        k: r for k in {t.metadata["boundary"] for t in tasks} for p, r in AIRLINE_RULES.items() if k.startswith(p)}
    conflicts = sum(own.get(t.metadata["boundary"]) in t.metadata["naive_rejections"] for t in tasks)
    return {
        "tasks": len(tasks), "cpu_s": round(cpu, 2), "cpu_s_per_task": round(cpu / max(1, len(tasks)), 3),
        "yield": result.stats["yield"], "drops": dict(result.drops),
        "rules_touched": len(rules), "compiled_rules": len(w.compiled_rules()),
        "boundary_kinds": len({t.metadata["boundary"] for t in tasks}),
        "boundary_conflict_rate": round(conflicts / max(1, len(tasks)), 3),
        "no_change_tasks": sum(not t.target_diff for t in tasks),
        "splits": {s: sum(t.split == s for t in tasks) for s in ("train", "test")},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (about a minute)")
    args = ap.parse_args()
    n_tasks = 14 if args.quick else 48
    # Similar row counts: retail ~11 rows per customer, airline ~3 rows per user.
    scales = {"retail": 10_000, "airline": 30_000} if args.quick else {"retail": 20_000, "airline": 60_000}
    out: dict[str, Any] = {"quick": args.quick, "n_tasks": n_tasks}
    for world in ("airline", "retail"):
        gen = generator_arm(world, scales[world])
        print(f"{world} generator: {gen}", flush=True)
        syn = synthesis_arm(world, n_tasks, seed=0)
        print(f"{world} synthesis: {syn}", flush=True)
        out[world] = {"generator": gen, "synthesis": syn}
    out["retail_vs_airline"] = {
        "rows_per_cpu_s": round(out["retail"]["generator"]["rows_per_cpu_s"]
                                / out["airline"]["generator"]["rows_per_cpu_s"], 2),
        "cpu_s_per_task": round(out["retail"]["synthesis"]["cpu_s_per_task"]
                                / max(1e-9, out["airline"]["synthesis"]["cpu_s_per_task"]), 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
