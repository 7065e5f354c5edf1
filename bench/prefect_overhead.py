"""Prefect's overhead on the end-to-end pipeline: the `trajforge-run` flow vs the very same
stage functions called as plain Python, on the same config in the same process.

    .venv/bin/python bench/prefect_overhead.py [--quick]

A fast scripted policy stands in for the model so the figure is our orchestration, not
generation. Caching is off in both so both do all the work. The Prefect server is started
(and a trivial flow run) before timing, as on a deployed pipeline where the server is up.
The last line printed is one JSON object of the figures; `overhead_ratio` is flow / plain
(best of the repeats, wall), `cpu_overhead_ratio` the same in CPU time of this process and
the Prefect server it started (steadier than wall time on a shared machine); both modes run
once untimed on 2 tasks first; `server_start_s` is the import and the ephemeral server's start
(a first trivial flow run), `fixed_flow_s` a one-task flow run once it is up: the fixed
cost every run pays.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def plain(cfg, out: Path) -> dict:
    """run_flow's stages without Prefect: the very functions its task runs call, in the same
    order, the shards on a plain thread pool of the same size (`runner.max_workers`)."""
    from concurrent.futures import ThreadPoolExecutor

    from data import store
    from data.records import PackedTasks
    from pipelines import figures, flows, sharded, stages
    from pipelines.stages import synthesis as synth
    from rollout.backends import close_shared_models

    stages.preflight(cfg)
    with ThreadPoolExecutor(max_workers=cfg.runner.max_workers) as pool:
        ranges = synth.seed_ranges(cfg)
        groups = synth.pack(ranges, cfg.runner.synthesis_shards)
        refs = [r for got in pool.map(lambda g: [synth.synthesize_range(cfg, r, out) for r in g], groups) for r in got]
        tp = synth.finish(cfg, out, ranges, refs)
        task_shards = flows._task_shards(cfg, tp)
        try:
            rollouts = list(pool.map(lambda s: sharded.rollout_part(list(s), cfg, out), task_shards))
        finally:
            close_shared_models()
        rp = sharded.write_dataset(rollouts, "trajectories", cfg, out, [tp])
        verifies = list(pool.map(lambda a: sharded.verify_part(list(a[0]), a[1], cfg, out), zip(task_shards, rollouts, strict=True)))
        vp = sharded.write_dataset(verifies, "verdicts", cfg, out, [tp, rp])
        curated_parts = list(pool.map(lambda a: sharded.curate_part(list(a[0]), a[1], a[2], cfg, out),
                                      zip(task_shards, rollouts, verifies, strict=True)))
    fig = sharded.merged_figures(cfg, curated_parts)
    curated = sharded.write_curated(cfg, out, curated_parts, fig, [tp, rp, vp])
    run_figures = figures.run_figures(cfg, PackedTasks.concat(task_shards), fig, store.read_manifest(tp).stats,
                                      stages.released_stats(curated), None)
    html = None
    if cfg.report:
        svgs = sharded.graph_svgs(cfg, fig, task_shards, rollouts, verifies)
        html = figures.report_html(fig, sum(len(s) for s in task_shards), svgs, head=run_figures["headline"],
                                   version=figures.RELEASE_VERSION)
    published = stages.publish_release(cfg, out, curated, "", report_html=html, run=run_figures)
    return figures.summary(sum(len(s) for s in task_shards), run_figures["headline"], published.paths, published)


def cpu_s() -> float:
    """CPU seconds of this process and its children alive now (the ephemeral Prefect server
    among them): what Prefect costs on the machine, whatever else runs on it."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1,000 trajectories instead of 10,000")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    n_tasks, trials = (20, 50) if args.quick else (50, 200)
    repeats = args.repeats or (3 if args.quick else 1)

    t0 = time.perf_counter()
    from prefect import flow

    from pipelines import flows
    from pipelines.config import load_config

    @flow
    def warm() -> int:
        return 1

    warm()
    server_start_s = time.perf_counter() - t0
    from prefect import task

    @task
    def one() -> int:
        return 1

    @flow
    def fixed() -> int:
        return one()

    t = time.perf_counter()
    with flows.run_settings():  # as `flows.execute` runs a flow (the CLI's way)
        fixed()
    fixed_flow_s = time.perf_counter() - t  # a flow run of one task run, the server up: the fixed cost a run pays
    cfg = load_config(None, {"synthesis.n_tasks": n_tasks, "synthesis.seed": 1, "rollout.model.kind": "scripted",
                             "rollout.model.noise": 0.3, "rollout.trials": trials, "reference_trials": 0,
                             "rollout.concurrency": 64, "shard_size": 4, "cache": False})
    root = Path(tempfile.mkdtemp(prefix="trajforge-overhead-"))
    times: dict[str, list[float]] = {"plain": [], "flow": []}
    cpu: dict[str, list[float]] = {"plain": [], "flow": []}  # this process's and the server's CPU
    counts = {}
    try:
        small = cfg.model_copy(update={"synthesis": cfg.synthesis.model_copy(update={"n_tasks": 2})})
        plain(small, root / "warm-plain")  # imports and first-call costs, untimed, for both
        flows.execute(flows.run_flow, small, str(root / "warm-flow"))
        for r in range(repeats):  # alternate so drift on a noisy machine hits both alike
            for mode in ("plain", "flow"):
                out = root / f"{mode}-{r}"
                t, c = time.perf_counter(), cpu_s()
                summary = plain(cfg, out) if mode == "plain" else flows.execute(flows.run_flow, cfg, str(out))
                times[mode].append(time.perf_counter() - t)
                cpu[mode].append(cpu_s() - c)
                counts[mode] = summary["policy_trajectories"]
                print(f"{mode:>5} run {r}: {times[mode][-1]:.1f} s ({cpu[mode][-1]:.1f} s CPU), "
                      f"{summary['policy_trajectories']} trajectories", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert counts["plain"] == counts["flow"], counts
    best = {k: min(v) for k, v in times.items()}
    print(json.dumps({
        "trajectories": counts["flow"], "tasks": n_tasks, "shards": -(-n_tasks // cfg.shard_size),
        "plain_s": round(best["plain"], 2), "flow_s": round(best["flow"], 2),
        "overhead_ratio": round(best["flow"] / best["plain"], 4),
        "cpu_plain_s": round(min(cpu["plain"]), 2), "cpu_flow_s": round(min(cpu["flow"]), 2),
        "cpu_overhead_ratio": round(min(cpu["flow"]) / min(cpu["plain"]), 4),
        "server_start_s": round(server_start_s, 2), "fixed_flow_s": round(fixed_flow_s, 3),
        "repeats": repeats, "quick": args.quick, "load_avg": [round(x, 2) for x in os.getloadavg()],
    }))


if __name__ == "__main__":
    main()
