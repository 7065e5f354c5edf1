"""Small-scale check of topology-based curation (TopoCurate, methods.md §4).

    .venv/bin/python bench/topocurate_check.py [--quick]

Tasks come from logic-driven synthesis (airline); the agent is the noisy scripted policy
(`rollout/policies.py`: malformed calls, unknown tools, wrong arguments, stopping early), its
noise cycling over `--noise` levels across tasks so that tasks differ in difficulty; the
user is scripted and every trajectory is verified by replay (state equivalence). No model.

(a) SFT: TopoCurate's pick vs all successful rollouts (and the outcome curator's pick):
    recovery rate (share of trajectories with ≥ 1 reflective recovery — the curator's own
    measure — and, model-free, share with an error turn) and mean length in turns.
(b) RL: 8 rollouts per task decide the pick; then a *fresh* GRPO group of 8 rollouts per task
    (other seeds) measures whether the group has non-zero reward variance (binary pass reward;
    the dense score is reported too). Picks at the same budget B (half the tasks with mixed
    outcomes), averaged over `--draws` sampling seeds:
    - topo: sampled ∝ EBR·SH among tasks with mixed outcomes (TopologyCurator, `rl_budget=B`);
    - passrate: the outcome curator's RL picks (pass rate alone: mixed outcomes, or unsolved
      by the policy but solved by the Explorer), B drawn uniformly;
    - passrate_band (a stronger pass-rate baseline): sampled ∝ p̂(1 − p̂) among mixed tasks.
    Shares without a budget (every pick of each curator) are reported as well.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from curation.base import get_curator
from curation.topology import TopoConfig, TopologyCurator, sampling_keys, top_keys
from data.records import Sampling, Task, Trajectory, Verdict
from envs.registry import get_world
from rollout.collector import RolloutConfig, collect
from rollout.policies import ScriptedPolicy
from synthesis.base import SynthesisConfig, get_method
from verifiers.base import get_verifier, primary_verifier


def rollouts(tasks: list[Task], noise: dict[str, float], k: int, seed: int) -> list[Trajectory]:
    cfg = RolloutConfig(trials=k, sampling=Sampling(temperature=0.7, max_tokens=128, seed=seed))
    return collect(tasks, cfg, model_for=lambda task: ScriptedPolicy(task, noise=noise[task.id]))


def verify(tasks: list[Task], trajs: list[Trajectory]) -> list[Verdict]:
    by_id = {t.id: t for t in tasks}
    names = ["state_equivalence", "constraint_satisfaction"]
    out = []
    for t in trajs:
        task = by_id[t.task_id]
        out.append(get_verifier(primary_verifier(task, names)).verify(task, t))
    return out


def sft_figures(
    trajs: list[Trajectory],
    verdicts: list[Verdict],
    tasks: list[Task],
    config: TopoConfig | None = None,
) -> dict:
    passed = {v.trajectory_id for v in verdicts if v.passed}
    topo = TopologyCurator(config)
    sel = topo.select(tasks, trajs, verdicts)
    assert topo.result is not None
    ix, sc = topo.result.index, topo.result.scores
    pos = {tid: i for i, tid in enumerate(ix.traj_ids)}
    outcome = get_curator("outcome").select(tasks, trajs, verdicts)
    groups = {
        "topo": [t for t, _ in sel.sft],
        "all": [t for t in trajs if t.id in passed],
        "outcome": [t for t, _ in outcome.sft],
    }

    def summary(ts: list[Trajectory]) -> dict:
        idx = np.asarray([pos[t.id] for t in ts], dtype=np.int64)
        return {
            "n": len(ts),
            "recovery_rate": round(float((sc.recoveries[idx] > 0).mean()), 4) if len(ts) else 0.0,
            "error_turn_rate": round(float(np.mean([any(s.error for s in t.steps) for t in ts])), 4)
            if ts
            else 0.0,
            "mean_len": round(float(np.mean([len(t.steps) for t in ts])), 3) if ts else 0.0,
            "mean_efficiency": round(float(sc.efficiency[idx].mean()), 4) if len(ts) else 0.0,
            # length among the trajectories that do recover: does the pick prefer short recoveries?
            "mean_len_recovering": round(float(np.mean(rec)), 3)
            if (rec := [len(t.steps) for t, i in zip(ts, idx, strict=True) if sc.recoveries[i] > 0])
            else 0.0,
        }

    drops = {k: v for k, v in sel.drops.items() if k.startswith("sft:")}
    return {name: summary(ts) for name, ts in groups.items()} | {"drops": drops}


def group_variance(
    fresh: list[Trajectory], verdicts: list[Verdict]
) -> tuple[dict[str, bool], dict[str, bool]]:
    """Per task: does the fresh group have non-zero variance of the pass reward / of the score?"""
    passes: dict[str, list[float]] = defaultdict(list)
    scores: dict[str, list[float]] = defaultdict(list)
    by_id = {v.trajectory_id: v for v in verdicts}
    for t in fresh:
        v = by_id[t.id]
        passes[t.task_id].append(float(v.passed))
        scores[t.task_id].append(v.score)
    return (
        {k: float(np.var(v)) > 0 for k, v in passes.items()},
        {k: float(np.var(v)) > 1e-12 for k, v in scores.items()},
    )


def sample(weights: np.ndarray, ids: list[str], budget: int, seed: int) -> list[str]:
    """`budget` of `ids` drawn without replacement ∝ `weights` with the curator's own sampler
    (`sampling_keys` from each id and `seed`, the largest keys kept), so the bench's topo draw
    at seed s is the pick of `TopologyCurator(TopoConfig(rl_budget=budget, seed=s))`."""
    return [ids[i] for i in top_keys(sampling_keys(weights, ids, seed), budget)]


def rl_figures(
    tasks: list[Task],
    trajs: list[Trajectory],
    verdicts: list[Verdict],
    fresh_nonzero: dict[str, bool],
    fresh_nonzero_score: dict[str, bool],
    draws: int,
) -> dict:
    topo = TopologyCurator()
    topo_all = topo.select(tasks, trajs, verdicts)
    assert topo.result is not None
    eligible = [p.task.id for p in topo_all.rl]
    pos = {tid: i for i, tid in enumerate(topo.result.index.task_ids)}
    ebr_sh = np.asarray(
        [topo.result.tasks.ebr[pos[t]] * topo.result.tasks.sh[pos[t]] for t in eligible]
    )
    rates = {p.task.id: p.pass_rate for p in topo_all.rl}
    band = np.asarray([rates[t] * (1 - rates[t]) for t in eligible])
    outcome = [p.task.id for p in get_curator("outcome").select(tasks, trajs, verdicts).rl]
    budget = max(1, len(eligible) // 2)

    def share(ids: list[str], table: dict[str, bool] = fresh_nonzero) -> float:
        return float(np.mean([table[i] for i in ids])) if ids else 0.0

    rng = np.random.default_rng(0)
    topo_s, pr_s, band_s, topo_sc, pr_sc = [], [], [], [], []
    for d in range(draws):
        t_ids = sample(ebr_sh, eligible, budget, seed=d)
        b_ids = sample(band, eligible, budget, seed=10_000 + d)
        o_ids = [outcome[i] for i in rng.permutation(len(outcome))[:budget]]
        topo_s.append(share(t_ids))
        band_s.append(share(b_ids))
        pr_s.append(share(o_ids))
        topo_sc.append(share(t_ids, fresh_nonzero_score))
        pr_sc.append(share(o_ids, fresh_nonzero_score))
    # the curator's own budgeted pick (seed 0) must agree with the sampler used above
    own = TopologyCurator(TopoConfig(rl_budget=budget)).select(tasks, trajs, verdicts)
    assert sorted(p.task.id for p in own.rl) == sorted(sample(ebr_sh, eligible, budget, seed=0))
    return {
        "budget": budget,
        "eligible_mixed": len(eligible),
        "outcome_picks": len(outcome),
        "nonzero_var_share_topo": round(float(np.mean(topo_s)), 4),
        "nonzero_var_share_passrate": round(float(np.mean(pr_s)), 4),
        "nonzero_var_share_passrate_band": round(float(np.mean(band_s)), 4),
        "nonzero_var_share_topo_dense_score": round(float(np.mean(topo_sc)), 4),
        "nonzero_var_share_passrate_dense_score": round(float(np.mean(pr_sc)), 4),
        "nonzero_var_share_topo_unbudgeted": round(share(eligible), 4),
        "nonzero_var_share_outcome_unbudgeted": round(share(outcome), 4),
        "nonzero_var_share_all_tasks": round(share([t.id for t in tasks]), 4),
        "rl_drops_topo": {k: v for k, v in topo_all.drops.items() if k.startswith("rl:")},
        "corr_ebr_sh_vs_fresh_nonzero": _corr(ebr_sh, [fresh_nonzero[t] for t in eligible]),
        "corr_band_vs_fresh_nonzero": _corr(band, [fresh_nonzero[t] for t in eligible]),
    }


def _corr(x: np.ndarray, y: list[bool]) -> float | None:
    ya = np.asarray(y, dtype=float)
    if len(x) < 3 or x.std() == 0 or ya.std() == 0:
        return None
    return round(float(np.corrcoef(x, ya)[0, 1]), 4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--quick", action="store_true", help="fewer tasks (about a minute on an idle machine)"
    )
    ap.add_argument("--tasks", type=int, default=None)
    ap.add_argument("--k", type=int, default=8, help="rollouts per task (and GRPO group size)")
    ap.add_argument(
        "--noise", default="0.15,0.3,0.45,0.6", help="policy noise levels, cycled over tasks"
    )
    ap.add_argument("--draws", type=int, default=200, help="sampling seeds averaged for (b)")
    ap.add_argument(
        "--graphs", default=None, help="folder to write SVG pictures of 3 task graphs into"
    )
    args = ap.parse_args()
    n_tasks = args.tasks or (24 if args.quick else 80)
    levels = [float(x) for x in args.noise.split(",")]
    t0 = time.perf_counter()
    tasks = get_method("logic_driven")(
        SynthesisConfig(n_tasks=n_tasks, seed=7), get_world("airline")
    ).tasks
    noise = {t.id: levels[i % len(levels)] for i, t in enumerate(tasks)}
    t_synth = time.perf_counter() - t0
    trajs = rollouts(tasks, noise, args.k, seed=1)
    verdicts = verify(tasks, trajs)
    fresh = rollouts(tasks, noise, args.k, seed=2)
    fresh_verdicts = verify(tasks, fresh)
    t_roll = time.perf_counter() - t0 - t_synth
    sft = sft_figures(trajs, verdicts, tasks)
    # sensitivity: the same pick with efficiency weighted 3x (recovery 1, efficiency 3, diversity 1)
    sft_eff = sft_figures(trajs, verdicts, tasks, TopoConfig(w_efficiency=3.0))["topo"]
    nonzero, nonzero_score = group_variance(fresh, fresh_verdicts)
    rl = rl_figures(tasks, trajs, verdicts, nonzero, nonzero_score, args.draws)
    figures = {
        "bench": "topocurate_check",
        "quick": args.quick,
        "tasks": len(tasks),
        "rollouts_per_task": args.k,
        "noise_levels": levels,
        "policy_pass_rate": round(float(np.mean([v.passed for v in verdicts])), 4),
        "sft": sft,
        "sft_topo_efficiency_x3": sft_eff,
        "rl": rl,
        "seconds": {
            "synthesis": round(t_synth, 1),
            "rollout_and_verify": round(t_roll, 1),
            "total": round(time.perf_counter() - t0, 1),
        },
        "nonzero_var_share_topo": rl["nonzero_var_share_topo"],
        "nonzero_var_share_passrate": rl["nonzero_var_share_passrate"],
        "sft_recovery_rate_topo": sft["topo"]["recovery_rate"],
        "sft_recovery_rate_all": sft["all"]["recovery_rate"],
        "sft_mean_len_topo": sft["topo"]["mean_len"],
        "sft_mean_len_all": sft["all"]["mean_len"],
    }
    if args.graphs:
        from curation.graphs import pick_tasks_to_draw, write_task_graph

        topo = TopologyCurator()
        topo.select(tasks, trajs, verdicts)
        assert topo.result is not None
        ix = topo.result.index
        figures["graphs"] = [
            str(write_task_graph(ix, tid, Path(args.graphs) / f"{tid}.svg"))
            for tid in pick_tasks_to_draw(ix, 3)
        ]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
