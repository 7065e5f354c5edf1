"""Curation time of TopoCurate at 100k trajectories (8 per task) and how it grows to 1M.

    .venv/bin/python bench/curation_scaling.py [--quick]

Synthetic rollouts are built in memory (no environment): each task has a 2–4 call
reference path; each turn may be a mistake (malformed call, unknown tool, a wrong argument
that errors, one that silently writes the wrong thing, or stopping early), as the noisy
scripted policy makes them. Within a task, rollouts share `Step` objects for equal turns
(so 1M trajectories fit in memory); arguments and observations differ between tasks.

Baseline, measured in the same run on the same records: the outcome curator (pass rates +
dedup by action sequence). `--quick` measures 100k and 25k and extrapolates 1M linearly
from the 100k point (`seconds_1m_extrapolated: true`); the full run measures 1M.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import time

from curation.base import get_curator
from data.records import StateRef, Step, Task, ToolCall, Trajectory, UserScenario, Verdict

# Records are shallow copies of validated templates (`model_construct` is ~50x slower here).
_STEP = Step(index=0, turn=0)
_TOOLCALL = ToolCall(name="x")
_TRAJ = Trajectory(task_id="t", trial=0, model="synthetic", termination="user_stop")
_VERDICT = Verdict(
    trajectory_id="x",
    task_id="t",
    verifier="synthetic",
    verifier_version="1",
    passed=False,
    score=0.0,
)
_TASK = Task(
    world="synthetic",
    method="synthetic",
    instruction="",
    user=UserScenario(),
    target_state_hash="",
    initial_state=StateRef(world="synthetic", seed=0, scale=0, state_hash=""),
)

TOOLS = [
    "get_user_details",
    "search_flights",
    "book_reservation",
    "update_baggage",
    "cancel_reservation",
]


def _mk_step(**fields: object) -> Step:
    return _STEP.model_copy(update=fields)


def _call(name: str, arguments: dict) -> ToolCall:
    return _TOOLCALL.model_copy(update={"name": name, "arguments": arguments})


class _TaskSteps:
    """The distinct turns of one synthetic task, built once and shared by its rollouts."""

    def __init__(self, j: int) -> None:
        self.j = j
        self.plan = [
            (TOOLS[(j + c) % len(TOOLS)], {"user_id": f"user_{j}", "ref": f"R{j}-{c}", "n": c})
            for c in range(2 + j % 3)
        ]
        self.cache: dict[tuple, Step] = {}

    def get(self, kind: str, c: int, pos: int, clean: bool = True) -> Step:
        key = (kind, c, pos, clean)
        step = self.cache.get(key)
        if step is None:
            step = self.cache[key] = self._build(kind, c, pos, clean)
        return step

    def _build(self, kind: str, c: int, pos: int, clean: bool) -> Step:
        j = self.j
        name, args = self.plan[c] if c < len(self.plan) else ("", {})
        base = {"index": pos, "turn": pos}
        if kind == "malformed":
            return _mk_step(
                **base,
                action=None,
                error="bad_json",
                observation='{"error": "bad_json", "message": "could not parse the tool call"}',
            )
        if kind == "unknown_tool":
            return _mk_step(
                **base,
                action=_call(name + "_v2", args),
                error="unknown_tool",
                observation=json.dumps(
                    {
                        "error": "unknown_tool",
                        "code": "unknown_tool",
                        "message": f"no tool named {name}_v2",
                    }
                ),
            )
        if kind == "wrong_argument":
            bad = {**args, "ref": args["ref"] + "X"}
            return _mk_step(
                **base,
                action=_call(name, bad),
                error="tool_error",
                observation=json.dumps(
                    {"error": "tool_error", "code": "not_found", "message": f"no {bad['ref']}"}
                ),
            )
        if kind == "silent_wrong":  # a wrong write that succeeds: the task can no longer pass
            bad = {**args, "n": c + 100}
            return _mk_step(
                **base,
                action=_call(name, bad),
                observation=json.dumps({"ok": True, "user": f"user_{j}", "changed": c + 100}),
                state_hash=f"{j}-{c}-bad",
            )
        if kind == "end":
            return _mk_step(**base, action=None, observation="", state_hash=f"{j}-end-{clean}")
        return _mk_step(
            **base,
            action=_call(name, args),
            observation=json.dumps(
                {"ok": True, "user": f"user_{j}", "step": c, "record": args["ref"]}
            ),
            state_hash=f"{j}-{c}" + ("" if clean else "-bad"),
        )


MISTAKES = ["malformed", "unknown_tool", "wrong_argument", "silent_wrong", "stop"]


def synthetic(
    n_tasks: int, k: int = 8, noise: float = 0.3, seed: int = 0
) -> tuple[list[Task], list[Trajectory], list[Verdict]]:
    """`n_tasks` tasks with `k` synthetic rollouts each, and their verdicts."""
    rng = random.Random(seed)
    tasks: list[Task] = []
    trajs: list[Trajectory] = []
    verdicts: list[Verdict] = []
    for j in range(n_tasks):
        tid = f"task-{j:07d}"
        tasks.append(_TASK.model_copy(update={"id": tid}))
        turns = _TaskSteps(j)
        for r in range(k):
            steps: list[Step] = []
            clean, stopped = True, False
            for c in range(len(turns.plan)):
                while not stopped and rng.random() < noise:
                    kind = rng.choice(MISTAKES)
                    if kind == "stop":
                        stopped = True
                    else:
                        clean = clean and kind != "silent_wrong"
                        steps.append(turns.get(kind, c, len(steps)))
                if stopped:
                    break
                steps.append(turns.get("ok", c, len(steps), clean))
            steps.append(turns.get("end", -1, len(steps), clean))
            passed = clean and not stopped
            traj = _TRAJ.model_copy(
                update={
                    "id": f"{tid}-{r}",
                    "task_id": tid,
                    "trial": r,
                    "steps": steps,
                    "metadata": {},
                }
            )
            trajs.append(traj)
            verdicts.append(
                _VERDICT.model_copy(
                    update={
                        "trajectory_id": traj.id,
                        "task_id": tid,
                        "passed": passed,
                        "score": float(passed),
                    }
                )
            )
    return tasks, trajs, verdicts


def time_curator(
    name: str, data: tuple[list[Task], list[Trajectory], list[Verdict]]
) -> tuple[float, float, dict]:
    """Wall and CPU seconds of one `select` (CPU time is this process's own: the fair
    one-core figure on a machine shared with other jobs)."""
    tasks, trajs, verdicts = data
    curator = get_curator(name)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    sel = curator.select(tasks, trajs, verdicts)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return dt, dc, {"sft": len(sel.sft), "rl": len(sel.rl), "drops": dict(sel.drops)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="25k and 100k measured; 1M extrapolated")
    ap.add_argument("--k", type=int, default=8, help="rollouts per task")
    args = ap.parse_args()
    sizes = [25_000, 100_000] if args.quick else [100_000, 300_000, 1_000_000]
    figures: dict = {
        "bench": "curation_scaling",
        "quick": args.quick,
        "rollouts_per_task": args.k,
        "load_avg_start": round(os.getloadavg()[0], 2),
        "points": [],
    }
    for n in sizes:
        t0 = time.perf_counter()
        data = synthetic(n // args.k, args.k)
        build = time.perf_counter() - t0
        steps = sum(len(t.steps) for t in data[1])
        topo, topo_cpu, topo_sel = time_curator("topology", data)
        outcome, outcome_cpu, _ = time_curator("outcome", data)
        figures["points"].append(
            {
                "trajectories": len(data[1]),
                "steps": steps,
                "build_s": round(build, 2),
                "topology_s": round(topo, 3),
                "topology_cpu_s": round(topo_cpu, 3),
                "outcome_s": round(outcome, 3),
                "outcome_cpu_s": round(outcome_cpu, 3),
                "topology_selection": {"sft": topo_sel["sft"], "rl": topo_sel["rl"]},
                "load_avg": round(os.getloadavg()[0], 2),
            }
        )
        del data
        gc.collect()
    by_n = {p["trajectories"]: p for p in figures["points"]}
    small, big = figures["points"][0], figures["points"][-1]
    # growth exponent b in t ∝ n^b, from CPU time (less disturbed by other jobs than wall time)
    b = math.log(big["topology_cpu_s"] / small["topology_cpu_s"]) / math.log(
        big["trajectories"] / small["trajectories"]
    )
    figures["growth_exponent"] = round(b, 3)
    p100 = by_n[100_000]
    figures["seconds_100k"] = p100["topology_s"]
    figures["cpu_seconds_100k"] = p100["topology_cpu_s"]
    figures["outcome_seconds_100k"] = p100["outcome_s"]
    figures["outcome_cpu_seconds_100k"] = p100["outcome_cpu_s"]
    if 1_000_000 in by_n:
        figures["seconds_1m"] = by_n[1_000_000]["topology_s"]
        figures["cpu_seconds_1m"] = by_n[1_000_000]["topology_cpu_s"]
        figures["seconds_1m_extrapolated"] = False
    else:
        scale = 10 ** max(b, 1.0)  # never extrapolate better than linear
        figures["seconds_1m"] = round(p100["topology_s"] * scale, 2)
        figures["cpu_seconds_1m"] = round(p100["topology_cpu_s"] * scale, 2)
        figures["seconds_1m_extrapolated"] = True
        figures["extrapolation"] = (
            "t_100k * 10**max(1, growth_exponent) from the 25k and 100k points"
        )
    figures["target_100k_s"] = 30.0
    figures["meets_target"] = figures["cpu_seconds_100k"] <= 30.0
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
