"""Peak memory and throughput of a whole `trajforge run` against its size, scripted model.

Each size is one fresh process running the real flow (`trajforge run`: synthesize, roll out,
verify, curate, release) with the scripted policy (`rollout.model.kind=scripted`, noise 0.4),
the setup issue 20 measured: 40 trials plus 1 reference trajectory per task and
`shard_size=25`, so a size of N trajectories is N / 41 tasks (`--trials` changes it). The
process's peak resident set (`ru_maxrss` of the reaped child) and its wall time are
measured; the machine's load is printed with them.

    .venv/bin/python bench/memory_scaling.py [--quick] [--sizes 1000,8000] [--profile DIR]

`--profile DIR` samples each size with py-spy (`pip install py-spy`) into `DIR/<size>.txt`
(folded stacks, all threads): compare the sizes' samples per 1k trajectories by function to
see what grows faster than the run.

`--quick`: 1k and 8k trajectories; full: 1k, 8k, 64k and 256k. The last line printed is one
JSON object: `peak_rss_mb` and `wall_s` per size, `mb_per_1k_trajectories` (the growth of
the peak between the two largest sizes), `trajectories_per_s` per size and at the largest,
`largest_vs_smallest_throughput` (issue 39: at least 0.9 from 32k to 256k), and the load
averages. Targets (issue 20): `mb_per_1k_trajectories` <= 2, peak at 256k
<= 1.5 GB, and trajectories/s at 8k no lower than before streaming (about 80 on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRIALS = 40  # per task, plus 1 reference trajectory
QUICK = (1000, 8000)
FULL = (1000, 8000, 64000, 256000)


def _children_hwm_kb(pid: int) -> int:
    """The largest peak resident set (VmHWM, kB) among `pid`'s children now running."""
    best = 0
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0
    for child in children:
        try:
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    best = max(best, int(line.split()[1]))
        except OSError:
            continue
    return best


def run_size(trajectories: int, out: Path, timeout_s: float, trials: int = TRIALS,
             profile_dir: Path | None = None) -> dict[str, Any]:
    """One `trajforge run` of `trajectories` / (trials + 1) tasks in a fresh process: wall,
    peak RSS. With `profile_dir`, py-spy samples the run (20 Hz, all threads, without pausing
    it) into `profile_dir/<size>.txt` as folded stacks; the run is then py-spy's child, and
    its peak is its high-water mark read from /proc while it runs."""
    tasks = max(1, trajectories // (trials + 1))
    spy: list[str] = []
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        spy = [str(Path(sys.executable).with_name("py-spy")), "record", "--nonblocking", "-r", "20", "-f", "raw",
               "-o", str(profile_dir / f"{trajectories}.txt"), "--"]
    argv = [*spy, sys.executable, "-m", "pipelines.cli", "run", "--out", str(out),
            "--set", f"synthesis.n_tasks={tasks}", "--set", "rollout.model.kind=scripted",
            "--set", "rollout.model.noise=0.4", "--set", f"rollout.trials={trials}",
            "--set", "reference_trials=1", "--set", "shard_size=25", "--set", "report=false"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
    load0 = os.getloadavg()[0]
    hwm_kb = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = t0 + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            if spy:
                hwm_kb = max(hwm_kb, _children_hwm_kb(proc.pid))
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        log.seek(0)
        text = log.read().decode(errors="replace")
    rc = os.waitstatus_to_exitcode(status)
    summary: dict[str, Any] = {}
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                summary = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    made = (summary.get("policy_trajectories") or 0) + (summary.get("reference_trajectories") or 0) or None
    return {"trajectories_asked": trajectories, "tasks_asked": tasks, "tasks": summary.get("tasks"), "rc": rc,
            "trajectories": made, "wall_s": round(wall, 1),
            "peak_rss_mb": round((hwm_kb if spy else usage.ru_maxrss) / 1024, 1),
            "trajectories_per_s": round(made / wall, 1) if made else None,
            "load_avg_1m_before": round(load0, 2), "load_avg_1m_after": round(os.getloadavg()[0], 2),
            **({"error_tail": text[-800:]} if rc != 0 else {})}


def throughput_ratio(ok: list[dict[str, Any]]) -> float | None:
    """Trajectories/s at the largest size over the smallest (issue 39: within 10%, >= 0.9)."""
    if len(ok) < 2:
        return None
    small, large = min(ok, key=lambda r: r["trajectories"]), max(ok, key=lambda r: r["trajectories"])
    return round(large["trajectories_per_s"] / small["trajectories_per_s"], 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1k and 8k trajectories")
    ap.add_argument("--sizes", default=None, help="comma-separated trajectory counts")
    ap.add_argument("--timeout-s", type=float, default=4 * 3600, help="per size")
    ap.add_argument("--trials", type=int, default=TRIALS, help="policy trials per task (plus 1 reference)")
    ap.add_argument("--profile", type=Path, default=None,
                    help="sample each size with py-spy (pip install py-spy) into this folder")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else list(QUICK if args.quick else FULL)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            results[str(n)] = run_size(n, Path(tmp) / f"run-{n}", args.timeout_s, args.trials, args.profile)
            print(json.dumps(results[str(n)]), flush=True)
    ok = [r for r in results.values() if r["rc"] == 0]
    growth = None
    if len(ok) >= 2:
        a, b = sorted(ok, key=lambda r: r["trajectories"])[-2:]
        growth = round((b["peak_rss_mb"] - a["peak_rss_mb"]) / ((b["trajectories"] - a["trajectories"]) / 1000), 2)
    largest = max(ok, key=lambda r: r["trajectories"]) if ok else None
    print(json.dumps({
        "bench": "memory_scaling", "quick": args.quick, "cpus": os.cpu_count(), "trials_per_task": args.trials,
        "peak_rss_mb": {k: r["peak_rss_mb"] for k, r in results.items()},
        "wall_s": {k: r["wall_s"] for k, r in results.items()},
        "trajectories_per_s_by_size": {k: r["trajectories_per_s"] for k, r in results.items()},
        "mb_per_1k_trajectories": growth,
        "trajectories_per_s": largest["trajectories_per_s"] if largest else None,
        "largest_vs_smallest_throughput": throughput_ratio(ok),
        "failed_sizes": [k for k, r in results.items() if r["rc"] != 0],
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "target_mb_per_1k": 2, "target_peak_mb_at_256k": 1536,
    }))


if __name__ == "__main__":
    main()
