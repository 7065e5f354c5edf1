"""State-equivalence verification throughput on airline tasks with scripted trajectories.

Arms, all on the same trajectories in the same run, timed in CPU seconds of this single
thread (so the figures are per core, and other processes on the machine do not count):

- `raw_replay`: a fresh copy of the initial state per trajectory and its write calls
  replayed, without any scoring (the floor of the previous design's work);
- `full_dump_verifier`: the previous `StateVerifier` path (`score_calls_full`: rebuild the
  state, dump it whole before and after, hash and diff the dumps);
- `state_verifier`: `StateVerifier.verify` as shipped (cached initial states, writes in a
  rolled-back transaction, only changed rows re-read), first pass (cold cache) and steady
  state.

Every trajectory's fast verdict is checked against the full-dump score (`mismatches`).

    .venv/bin/python bench/verify_throughput.py [--quick]

The last line printed is one JSON object; `verifications_per_s_per_core` is the steady
state of `state_verifier` (target >= 2,000/s).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from data.records import Task, Trajectory
from envs.registry import get_world
from rollout.collector import ModelConfig, RolloutConfig, collect
from synthesis.base import SynthesisConfig, get_method
from verifiers import state as vs


def cpu_rate(fn: Callable[[], int], min_s: float) -> dict[str, float]:
    """Run `fn` (returns items done) until `min_s` CPU seconds have passed."""
    n = 0
    t0 = time.process_time()
    w0 = time.perf_counter()
    while True:
        n += fn()
        cpu = time.process_time() - t0
        if cpu >= min_s:
            break
    wall = time.perf_counter() - w0
    return {
        "items": n,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "per_s_per_core": round(n / cpu, 1),
        "us_per_item": round(1e6 * cpu / n, 1),
    }


def raw_replay(pairs: list[tuple[Task, Trajectory]]) -> int:
    world = get_world("airline")
    for task, traj in pairs:
        env = world.env(task.initial_state)
        for call in traj.actions():
            spec = world.tools.get(call.name)
            if spec is not None and spec.write:
                env.call(call)
        env.close()
    return len(pairs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer tasks and shorter timing windows")
    args = ap.parse_args()
    n_tasks, trials, window = (14, 6, 2.0) if args.quick else (35, 10, 6.0)
    world = get_world("airline")
    tasks: list[Task] = []
    seed = 0
    while len(tasks) < n_tasks:
        tasks += get_method("logic_driven")(SynthesisConfig(n_tasks=7, seed=seed), world).tasks
        seed += 1
    tasks = tasks[:n_tasks]
    cfg = RolloutConfig(
        model=ModelConfig(kind="scripted", options={"noise": 0.3}), trials=trials, concurrency=64
    )
    trajs = collect(tasks, cfg)
    gold = collect(
        tasks, RolloutConfig(model=ModelConfig(kind="scripted"), trials=1, concurrency=64)
    )
    by_id = {t.id: t for t in tasks}
    pairs = [(by_id[t.task_id], t) for t in [*gold, *trajs]]
    writes = sum(
        1
        for _, t in pairs
        for c in t.actions()
        if world.tools.get(c.name) and world.tools[c.name].write
    )

    verifier = vs.StateVerifier()
    # Agreement first: the shipped path against the full-dump path on every trajectory.
    mismatches = 0
    passed = 0
    for task, traj in pairs:
        fast, full = vs.score_calls(task, traj.actions()), vs.score_calls_full(task, traj.actions())
        mismatches += fast != full
        passed += fast.exact

    vs._cache().clear()
    t0 = time.process_time()
    for task, traj in pairs:
        verifier.verify(task, traj)
    cold = len(pairs) / (time.process_time() - t0)

    base_raw = cpu_rate(lambda: raw_replay(pairs), window)
    base_full = cpu_rate(
        lambda: [vs.score_calls_full(t, x.actions()) for t, x in pairs] and len(pairs), window
    )
    fast = cpu_rate(lambda: [verifier.verify(t, x) for t, x in pairs] and len(pairs), window)
    figures = {
        "bench": "verify_throughput",
        "quick": args.quick,
        "tasks": len(tasks),
        "trajectories": len(pairs),
        "write_calls_per_trajectory": round(writes / len(pairs), 2),
        "exact_pass_share": round(passed / len(pairs), 3),
        "mismatches_vs_full_dump": mismatches,
        "raw_replay": base_raw,
        "full_dump_verifier": base_full,
        "state_verifier": fast,
        "state_verifier_cold_cache_per_s": round(cold, 1),
        "speedup_vs_full_dump": round(fast["per_s_per_core"] / base_full["per_s_per_core"], 2),
        "speedup_vs_raw_replay": round(fast["per_s_per_core"] / base_raw["per_s_per_core"], 2),
        "verifications_per_s_per_core": fast["per_s_per_core"],
        "target_per_s_per_core": 2000,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
