"""Prefect's overhead on the end-to-end pipeline: the `trajforge-run` flow vs the very same
stage functions called as plain Python, on the same config in the same process.

    .venv/bin/python bench/prefect_overhead.py [--quick]

A fast scripted policy stands in for the model so the figure is our orchestration, not
generation. Caching is off in both so both do all the work. The Prefect server is started
(and a trivial flow run) before timing, as on a deployed pipeline where the server is up.
The last line printed is one JSON object of the figures; `overhead_ratio` is flow / plain.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def plain(cfg, out: Path) -> dict:
    """run_flow's stages without Prefect, shards on a plain thread pool of the same size."""
    from concurrent.futures import ThreadPoolExecutor

    from data import store
    from pipelines import stages

    tp = stages.synthesize(cfg, out)
    tasks = store.read_records(tp, "tasks")
    with ThreadPoolExecutor(max_workers=cfg.runner.max_workers) as pool:
        parts = list(pool.map(lambda shard: stages.rollout_shard(shard, cfg), stages.shards(tasks, cfg.shard_size)))
    trajectories = [t for part in parts for t in part]
    rp = stages.write_trajectories(trajectories, cfg, out, [tp])
    by_id = {t.id: t for t in tasks}
    groups: dict[str, list] = {}
    for t in trajectories:
        groups.setdefault(t.task_id, []).append(t)
    with ThreadPoolExecutor(max_workers=cfg.runner.max_workers) as pool:
        parts = list(pool.map(lambda chunk: stages.verify_shard(by_id, [t for g in chunk for t in g], cfg.verifiers),
                              stages.shards(list(groups.values()), cfg.shard_size)))
    verdicts = [v for part in parts for v in part]
    vp = stages.write_verdicts(verdicts, cfg, out, [tp, rp])
    selection = stages.curate(cfg, tasks, trajectories, verdicts)
    curated = stages.write_curated(cfg, out, selection, tasks, [tp, rp, vp])
    releases = stages.release(cfg, out, curated)
    return stages.summary(tasks, trajectories, verdicts, releases, selection)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1,000 trajectories instead of 10,000")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    n_tasks, trials = (20, 50) if args.quick else (50, 200)
    repeats = args.repeats or (2 if args.quick else 1)

    t0 = time.perf_counter()
    from prefect import flow

    from pipelines import flows
    from pipelines.config import load_config

    @flow
    def warm() -> int:
        return 1

    warm()
    server_start_s = time.perf_counter() - t0
    cfg = load_config(None, {"synthesis.n_tasks": n_tasks, "synthesis.seed": 1, "rollout.model.kind": "scripted",
                             "rollout.model.noise": 0.3, "rollout.trials": trials, "reference_trials": 0,
                             "rollout.concurrency": 64, "shard_size": 4, "cache": False})
    root = Path(tempfile.mkdtemp(prefix="trajforge-overhead-"))
    times: dict[str, list[float]] = {"plain": [], "flow": []}
    counts = {}
    try:
        for r in range(repeats):  # alternate so drift on a noisy machine hits both alike
            for mode in ("plain", "flow"):
                out = root / f"{mode}-{r}"
                t = time.perf_counter()
                summary = plain(cfg, out) if mode == "plain" else flows.run_flow(cfg.model_dump(mode="json"), str(out))
                times[mode].append(time.perf_counter() - t)
                counts[mode] = summary["policy_trajectories"]
                print(f"{mode:>5} run {r}: {times[mode][-1]:.1f} s, {summary['trajectories']} trajectories", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert counts["plain"] == counts["flow"], counts
    best = {k: min(v) for k, v in times.items()}
    print(json.dumps({
        "trajectories": counts["flow"], "tasks": n_tasks, "shards": -(-n_tasks // cfg.shard_size),
        "plain_s": round(best["plain"], 2), "flow_s": round(best["flow"], 2),
        "overhead_ratio": round(best["flow"] / best["plain"], 4),
        "server_start_s": round(server_start_s, 2), "repeats": repeats, "quick": args.quick,
    }))


if __name__ == "__main__":
    main()
