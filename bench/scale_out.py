"""Scale-out: the same `trajforge-run` on 1 and 2 Dask worker processes (and on a local Ray of
1 and 2 CPUs when the `ray` extra is installed), scripted model, caching off.

    .venv/bin/python bench/scale_out.py [--quick] [--no-ray]

For each runner it reports the wall time, trajectories/s and trajectories/s per worker, and
the time of each sharded stage (synthesis, rollout, verify, curate: from submitting its
shards to the last one back, `flows.gather`) against the driver's serial rest (writing the
datasets, dedup and hygiene, figures, report, release, and starting the runner, measured
alone as `runner_start_s`): the part that does not scale with workers. It then measures what bounds the driver whatever the workers: how many no-op task
runs a second it can create and collect on the same runner, and the bytes it holds per task
and per shard (`PackedTasks`, `PartRef`s). From these, the paper estimate of where the
driver saturates: N workers finish N / (seconds a shard) shards a second, each costing the
driver 1 / (task runs a second) seconds, so it saturates near
N* = (task runs a second) × (seconds a shard); see docs/operations.md.

Timings on a shared machine are noisy: compare the runners of one invocation only. The
last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def timed_run(flows: Any, cfg: Any, out: Path) -> dict[str, Any]:
    """One run: wall, trajectories, and each sharded stage's seconds (its `gather`)."""
    stage_s: dict[str, float] = {}
    gather = flows.gather

    def timed(futures: list[Any], stage: str, stall: float | None) -> list[Any]:
        t = time.perf_counter()
        try:
            return gather(futures, stage, stall)
        finally:
            stage_s[stage] = stage_s.get(stage, 0.0) + time.perf_counter() - t

    flows.gather = timed
    try:
        t0 = time.perf_counter()
        summary = flows.execute(flows.run_flow, cfg, str(out))
        wall = time.perf_counter() - t0
    finally:
        flows.gather = gather
    made = (summary.get("policy_trajectories") or 0) + (summary.get("reference_trajectories") or 0)
    return {"wall_s": round(wall, 2), "trajectories": made, "tasks": summary["tasks"],
            "trajectories_per_s": round(made / wall, 1),
            "sharded_stage_s": {k: round(v, 2) for k, v in stage_s.items()},
            "driver_serial_s": round(wall - sum(stage_s.values()), 2),
            "shards": {k: v.get("shards") for k, v in summary.get("cache", {}).items() if isinstance(v, dict)}}


def driver_rate(flows: Any, runner_cfg: Any, n: int, warm: int = 4) -> float:
    """No-op task runs a second the driver creates and collects on this runner, once its
    workers are warm (`warm` no-ops first, untimed: a worker's first task imports Prefect)."""
    from prefect import flow, task

    @task(name="noop")
    def noop(i: int) -> int:
        return i

    @flow(name="driver-rate")
    def many() -> float:
        flows.gather([noop.submit(i) for i in range(warm)], "noop", None)
        t = time.perf_counter()
        flows.gather([noop.submit(i) for i in range(n)], "noop", None)
        return time.perf_counter() - t

    with flows.run_settings():
        seconds = many.with_options(task_runner=flows.build_runner(runner_cfg))()
    return round(n / seconds, 1)


def runner_start_s(flows: Any, runner_cfg: Any) -> float:
    """Seconds to start and stop the runner alone (a Dask LocalCluster's processes; Ray's
    connection): part of a run's wall that is neither a stage nor the driver's work."""
    t = time.perf_counter()
    with flows.build_runner(runner_cfg):
        pass
    return round(time.perf_counter() - t, 2)


def driver_bytes(cfg: Any, out: Path) -> dict[str, int]:
    """Bytes the driver holds per task (packed) and per shard's `PartRef` (pickled, its
    figures included), from a finished run's datasets and parts."""
    from data import store
    from data.parts import PartRef
    from pipelines import flows

    shards = flows._task_shards(cfg, store.latest(out / "datasets", "tasks"))
    n = sum(len(s) for s in shards)
    refs = []
    for side in (out / "parts").rglob("*.json"):
        meta = json.loads(side.read_text())
        refs.append(len(pickle.dumps(PartRef(str(side.with_suffix(".parquet")), meta["rows"], meta.get("meta") or {},
                                             sha256=meta.get("sha256", "")))))
    return {"bytes_per_task_packed": sum(len(pickle.dumps(s)) for s in shards) // max(1, n),
            "bytes_per_part_ref_max": max(refs, default=0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="24 tasks x 20 trials instead of 100 x 40")
    ap.add_argument("--no-ray", action="store_true", help="leave Ray out even when installed")
    args = ap.parse_args()
    n_tasks, trials = (24, 20) if args.quick else (100, 40)

    from pipelines import flows
    from pipelines.config import load_config

    base = {"synthesis.n_tasks": n_tasks, "synthesis.seed": 1, "synthesis_shard_tasks": max(2, n_tasks // 4),
            "rollout.model.kind": "scripted", "rollout.model.noise": 0.4, "rollout.trials": trials,
            "reference_trials": 1, "rollout.concurrency": 16, "shard_size": max(2, n_tasks // 8), "cache": False,
            "report": False}
    runners: list[tuple[str, int, dict[str, Any]]] = [
        ("dask", 1, {"runner.kind": "dask", "runner.n_workers": 1}),
        ("dask", 2, {"runner.kind": "dask", "runner.n_workers": 2}),
    ]
    ray = None
    if not args.no_ray:
        try:
            import prefect_ray  # noqa: F401
            import ray
        except ImportError:
            ray = None
    if ray is not None:
        runners += [("ray", 1, {"runner.kind": "ray"}), ("ray", 2, {"runner.kind": "ray"})]
    root = Path(tempfile.mkdtemp(prefix="trajforge-scale-out-"))
    results: list[dict[str, Any]] = []
    try:
        for kind, workers, sets in runners:
            cfg = load_config(None, {**base, **sets})
            out = root / f"{kind}-{workers}"
            ray_tmp = None
            if kind == "ray":
                ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
                ray.init(num_cpus=workers, include_dashboard=False, object_store_memory=80 * 2**20,
                         _temp_dir=ray_tmp, namespace="prefect", log_to_driver=False)
            try:
                r = timed_run(flows, cfg, out)
                r["runner_start_s"] = runner_start_s(flows, cfg.runner)
                r["driver_task_runs_per_s"] = driver_rate(flows, cfg.runner, 40 if args.quick else 200)
            finally:
                if ray_tmp:
                    ray.shutdown()
                    shutil.rmtree(ray_tmp, ignore_errors=True)
            r.update({"runner": kind, "workers": workers,
                      "trajectories_per_s_per_worker": round(r["trajectories_per_s"] / workers, 1)})
            if not results:
                r.update(driver_bytes(cfg, out))
            results.append(r)
            print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    by = {(r["runner"], r["workers"]): r for r in results}
    scaling: dict[str, Any] = {}
    for kind in {r["runner"] for r in results}:
        one, two = by.get((kind, 1)), by.get((kind, 2))
        if one and two:
            scaling[kind] = {
                "speedup_2_over_1": round(one["wall_s"] / two["wall_s"], 2),
                "stage_speedup": {k: round(one["sharded_stage_s"][k] / v, 2) if v else None
                                  for k, v in two["sharded_stage_s"].items() if k in one["sharded_stage_s"]},
                "driver_serial_share_at_2": round(two["driver_serial_s"] / two["wall_s"], 3),
            }
    first = results[0]
    shard_s = first["sharded_stage_s"].get("rollout", 0.0) / max(1, first["shards"].get("rollout") or 1)
    rate = min(r["driver_task_runs_per_s"] for r in results)
    print(json.dumps({
        "bench": "scale_out", "quick": args.quick, "cpus": os.cpu_count(), "tasks": n_tasks, "trials": trials,
        "runs": results, "scaling": scaling,
        "not_scaling": "driver_serial_s: writing datasets, dedup/hygiene, figures and release run in the driver",
        "driver_saturation_estimate": {
            "rollout_seconds_per_shard_on_one_worker": round(shard_s, 2),
            "driver_task_runs_per_s": rate,
            "workers_at_saturation": round(rate * shard_s, 1),
            "bytes_per_task_packed": first.get("bytes_per_task_packed"),
            "bytes_per_part_ref_max": first.get("bytes_per_part_ref_max"),
        },
        "ray": ray is not None, "load_avg": [round(x, 2) for x in os.getloadavg()],
    }))


if __name__ == "__main__":
    main()
