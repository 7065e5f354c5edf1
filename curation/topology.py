"""Topology-based curation (TopoCurate, methods.md §4): pick SFT trajectories and RL tasks
by the structure of many rollouts of one task.

The k rollouts of a task are merged by a quotient map into one graph (`curation.quotient`:
equivalent histories are one node; per node the success potential Φ(v) = (s(v) + 1) /
(n(v) + 2) **(ours)**), scored here with numpy over its flat arrays, so 100k trajectories
curate in seconds.

Per successful trajectory (SFT weight, each part normalised to [0, 1] within its task):
- reflective recovery: setbacks recovered from — maximal runs of turns that are an error
  or drop Φ by more than `delta` from their parent, each followed by a turn that is neither;
- semantic efficiency: shortest successful path length of the task / its length;
- diversity: −log of the product of its branch-choice frequencies among successes, which
  telescopes to −log(s(leaf) / s(root)).
Weight **(ours)** = weighted mean of the three (equal weights by default). Per task the
cleanest passing row (fewest failed calls, the reference dialogue before a policy rollout)
is kept whatever its weight, and the other `sft_per_task - 1` places go to the distinct
paths of highest weight (recovery rows among them, marked as such in the release).

Per task (RL): error branch ratio EBR = failing children / children over nodes with ≥ 2
children (a child is failing when no success passes through it), strategic heterogeneity
SH = distinct successful action sequences / successful rollouts. Tasks whose policy
rollouts all pass or all fail give GRPO zero reward variance and are dropped; the rest are
kept (or, with `rl_budget`, sampled without replacement in proportion to EBR·SH).

Reference (gold) trajectories are nodes of the graph and SFT candidates, but pass rates,
and so the zero-variance rule, count policy rollouts only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from curation.base import RLPick, Selection, cleanest_first, register
from curation.quotient import MALFORMED, MESSAGE, QuotientIndex, build_index, task_graph_nodes
from data.records import Task, Trajectory, Verdict, content_hash

# re-exported: the quotient graph lives in `curation.quotient`
__all__ = ["MALFORMED", "MESSAGE", "SAMPLED", "QuotientIndex", "TaskTopology", "TopoConfig", "TopoResult",
           "TopologyCurator", "TrajectoryScores", "build_index", "sampling_keys", "task_graph_nodes",
           "task_topology", "top_keys", "trajectory_scores"]


class TopoConfig(BaseModel):
    """Knobs of TopoCurate (its `curation_options`); the defaults are the project's own choices (ours)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    delta: float = 0.1  # a Φ drop larger than this counts as a setback
    w_recovery: float = 1.0
    w_efficiency: float = 1.0
    w_diversity: float = 1.0
    sft_per_task: int | None = 2  # best distinct successful paths kept per task; None keeps all
    min_weight: float = 0.0  # successful paths weighted below this are dropped
    rl_budget: int | None = None  # tasks sampled ∝ EBR·SH; None keeps every eligible task
    seed: int = 0  # for RL sampling
    normalize: Literal["json", "exact"] = "json"  # how observations are normalised for the key

    @model_validator(mode="after")
    def _check(self) -> TopoConfig:
        if self.delta < 0:
            raise ValueError(f"delta must be >= 0, got {self.delta}")
        ws = (self.w_recovery, self.w_efficiency, self.w_diversity)
        if min(ws) < 0 or sum(ws) <= 0:
            raise ValueError(f"SFT weights must be >= 0 with a positive sum, got {ws}")
        if self.sft_per_task is not None and self.sft_per_task < 1:
            raise ValueError(f"sft_per_task must be >= 1 or None, got {self.sft_per_task}")
        if self.rl_budget is not None and self.rl_budget < 0:
            raise ValueError(f"rl_budget must be >= 0 or None, got {self.rl_budget}")
        if self.normalize not in ("json", "exact"):
            raise ValueError(f"normalize must be 'json' or 'exact', got {self.normalize!r}")
        return self


@dataclass
class TaskTopology:
    """Per-task figures (arrays indexed by task index of the `QuotientIndex`)."""

    ebr: np.ndarray
    sh: np.ndarray
    policy_trials: np.ndarray
    policy_passes: np.ndarray
    branching_nodes: np.ndarray


def task_topology(ix: QuotientIndex) -> TaskTopology:
    """Error branch ratio and strategic heterogeneity of every task (vectorised)."""
    k = len(ix.task_ids)
    m = ix.n_nodes
    child = np.nonzero(ix.node_parent >= 0)[0]
    parent = ix.node_parent[child]
    n_children = np.bincount(parent, minlength=m)
    failing = np.bincount(
        parent, weights=(ix.successes[child] == 0).astype(np.float64), minlength=m
    )
    branching = n_children >= 2
    num = np.bincount(ix.node_task, weights=np.where(branching, failing, 0.0), minlength=k)
    den = np.bincount(ix.node_task, weights=np.where(branching, n_children, 0), minlength=k)
    ebr = np.divide(num, den, out=np.zeros(k), where=den > 0)
    ok = ix.traj_passed
    succ_per_task = np.bincount(ix.traj_task[ok], minlength=k)
    distinct = (
        np.unique(np.stack([ix.traj_task[ok], ix.traj_actions[ok]]), axis=1)
        if ok.any()
        else np.zeros((2, 0), int)
    )
    n_distinct = np.bincount(distinct[0], minlength=k) if distinct.size else np.zeros(k)
    sh = np.divide(n_distinct, succ_per_task, out=np.zeros(k), where=succ_per_task > 0)
    pol = ~ix.traj_reference
    trials = np.bincount(ix.traj_task[pol], minlength=k)
    passes = np.bincount(ix.traj_task[pol & ok], minlength=k)
    return TaskTopology(
        ebr=ebr,
        sh=sh,
        policy_trials=trials,
        policy_passes=passes,
        branching_nodes=np.bincount(ix.node_task, weights=branching, minlength=k).astype(int),
    )


@dataclass
class TrajectoryScores:
    """SFT figures of every trajectory (zeros for failed ones)."""

    recoveries: np.ndarray
    efficiency: np.ndarray
    diversity: np.ndarray
    weight: np.ndarray


def _group_max(values: np.ndarray, groups: np.ndarray, k: int, mask: np.ndarray) -> np.ndarray:
    out = np.zeros(k)
    np.maximum.at(out, groups[mask], values[mask])
    return out


def trajectory_scores(ix: QuotientIndex, cfg: TopoConfig) -> TrajectoryScores:
    """Reflective recovery, semantic efficiency, diversity and their combined weight."""
    n = len(ix.traj_ids)
    k = len(ix.task_ids)
    ok = ix.traj_passed
    v = ix.step_node
    dip = ix.node_error[v] | ((ix.phi[ix.node_parent[v]] - ix.phi[v]) > cfg.delta)
    if len(v):
        nxt_same = np.zeros(len(v), dtype=bool)
        nxt_same[:-1] = ix.step_traj[1:] == ix.step_traj[:-1]
        nxt_dip = np.zeros(len(v), dtype=bool)
        nxt_dip[:-1] = dip[1:]
        event = dip & nxt_same & ~nxt_dip
        recov = np.bincount(ix.step_traj, weights=event.astype(np.float64), minlength=n)
    else:
        recov = np.zeros(n)
    recov = np.where(ok, recov, 0.0)
    length = np.maximum(ix.traj_len, 1).astype(np.float64)
    shortest = np.full(k, np.inf)
    np.minimum.at(shortest, ix.traj_task[ok], length[ok])
    eff = np.where(ok, shortest[ix.traj_task] / length, 0.0)
    roots_succ = np.zeros(k)
    roots = np.nonzero(ix.node_parent < 0)[0]
    roots_succ[ix.node_task[roots]] = ix.successes[roots]
    leaf_succ = ix.successes[ix.traj_leaf].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        div = np.where(
            ok, -np.log(np.maximum(leaf_succ, 1) / np.maximum(roots_succ[ix.traj_task], 1)), 0.0
        )
    div = np.maximum(div, 0.0)
    rmax = _group_max(recov, ix.traj_task, k, ok)[ix.traj_task]
    dmax = _group_max(div, ix.traj_task, k, ok)[ix.traj_task]
    r_n = np.divide(recov, rmax, out=np.zeros(n), where=rmax > 0)
    d_n = np.divide(div, dmax, out=np.zeros(n), where=dmax > 0)
    total = cfg.w_recovery + cfg.w_efficiency + cfg.w_diversity
    weight = (cfg.w_recovery * r_n + cfg.w_efficiency * eff + cfg.w_diversity * d_n) / total
    return TrajectoryScores(
        recoveries=recov.astype(np.int64),
        efficiency=eff,
        diversity=div,
        weight=np.where(ok, weight, 0.0),
    )


@dataclass
class TopoResult:
    """What the last `select` computed, for reports and graph pictures."""

    index: QuotientIndex
    tasks: TaskTopology
    scores: TrajectoryScores
    sft_reasons: dict[str, str]  # trajectory id -> why it was picked


def sampling_keys(weights: np.ndarray, ids: list[str], seed: int) -> np.ndarray:
    """Efraimidis–Spirakis keys log(u)/w with u drawn from each item's id and `seed`, not from
    its position: the `budget` largest keys are a sample without replacement ∝ weight, and
    the sample is the same whether the items are judged together or shard by shard (a
    streamed run keeps the largest keys over all shards). Zero weights get -inf."""
    u = np.asarray([(int(content_hash([seed, i], length=13), 16) + 0.5) / 16**13 for i in ids])
    with np.errstate(divide="ignore"):
        return np.where(weights > 0, np.log(u) / np.where(weights > 0, weights, 1.0), -np.inf)


def top_keys(keys: np.ndarray, budget: int) -> np.ndarray:
    """Indices of the `budget` largest keys (ties: the earlier item), in item order."""
    order = np.lexsort((np.arange(len(keys)), -keys))
    return np.sort(order[:budget])


SAMPLED = "sampled_by_ebr_sh"  # the reason of an rl pick drawn under `rl_budget`


class TopologyCurator:
    """TopoCurate: SFT picks by recovery, efficiency and diversity; RL tasks by EBR·SH.

    Everything but `rl_budget` is decided within each task's group, so a run curates shard
    by shard: `combine_stats(..., MEANS)` merges the shards' stats, and a streamed run
    applies the budget over the shards' picks by their `key`s (`sampling_keys`)."""

    name = "topology"
    MEANS = {"policy_pass_rate": ("policy_passes", "policy_trials"), "mean_ebr": "policy_tasks", "mean_sh": "policy_tasks",
             "sft_recovery_rate_picked": "sft_selected", "sft_mean_len_picked": "sft_selected",
             "sft_recovery_rate_all_successes": "passing_trajectories",
             "sft_mean_len_all_successes": "passing_trajectories"}

    def __init__(self, config: TopoConfig | None = None, **options: Any) -> None:
        self.config = config or TopoConfig(**options)
        self.result: TopoResult | None = None

    def select(
        self, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict]
    ) -> Selection:
        cfg = self.config
        sel = Selection()
        by_traj = {v.trajectory_id: v for v in verdicts}
        ordered = sorted(trajectories, key=lambda t: (t.task_id, *cleanest_first(t)))
        verified = []
        for t in ordered:
            if t.id in by_traj:
                verified.append(t)
            else:
                sel.drops["sft:unverified"] += 1
        ix = build_index(verified, {t.id: by_traj[t.id].passed for t in verified}, cfg.normalize)
        topo = task_topology(ix)
        scores = trajectory_scores(ix, cfg)
        reasons = self._select_sft(sel, ix, scores, verified, by_traj)
        sel.sft_reasons.update(reasons)
        self._select_rl(sel, tasks, ix, topo)
        self.result = TopoResult(ix, topo, scores, reasons)
        sel.stats = self._stats(tasks, trajectories, ix, topo, scores, sel, reasons)
        return sel

    def _select_sft(
        self,
        sel: Selection,
        ix: QuotientIndex,
        sc: TrajectoryScores,
        verified: list[Trajectory],
        by_traj: dict[str, Verdict],
    ) -> dict[str, str]:
        cfg = self.config
        ok = ix.traj_passed
        sel.drops["sft:failed_verification"] += int((~ok).sum())
        cand = np.nonzero(ok)[0]
        # Identical paths (same leaf of the quotient graph) teach the same thing once: keep
        # one, the first in `verified`'s order, which puts a task's cleanest rows first.
        _, first = np.unique(ix.traj_leaf[cand], return_index=True)
        uniq = cand[np.sort(first)]
        sel.drops["sft:duplicate_path"] += len(cand) - len(uniq)
        # Each task's cleanest passing row (fewest failed calls, the reference first) is kept
        # whatever its weight; the other places go by weight.
        _, first_of_task = np.unique(ix.traj_task[uniq], return_index=True)
        cleanest = np.zeros(len(uniq), dtype=bool)
        cleanest[first_of_task] = True
        low = (sc.weight[uniq] < cfg.min_weight) & ~cleanest
        sel.drops["sft:below_min_weight"] += int(low.sum())
        uniq, cleanest = uniq[~low], cleanest[~low]
        order = uniq[np.lexsort((uniq, -sc.weight[uniq], ~cleanest, ix.traj_task[uniq]))]
        is_cleanest = set(uniq[cleanest].tolist())
        task = ix.traj_task[order]
        starts = np.searchsorted(task, task, side="left")
        rank = np.arange(len(order)) - starts
        limit = cfg.sft_per_task if cfg.sft_per_task is not None else len(order) + 1
        keep = order[rank < limit]
        sel.drops["sft:below_task_top_k"] += int((rank >= limit).sum())
        total = cfg.w_recovery + cfg.w_efficiency + cfg.w_diversity
        rmax = _group_max(sc.recoveries.astype(float), ix.traj_task, len(ix.task_ids), ok)
        dmax = _group_max(sc.diversity, ix.traj_task, len(ix.task_ids), ok)
        reasons: dict[str, str] = {}
        for i in np.sort(keep):
            ti = ix.traj_task[i]
            parts = {
                "recovery": cfg.w_recovery * (sc.recoveries[i] / rmax[ti] if rmax[ti] > 0 else 0.0),
                "efficiency": cfg.w_efficiency * sc.efficiency[i],
                "diversity": cfg.w_diversity
                * (sc.diversity[i] / dmax[ti] if dmax[ti] > 0 else 0.0),
            }
            top = max(parts, key=lambda p: parts[p])
            t = verified[i]
            why = ("cleanest:reference" if t.reference else "cleanest:policy") if i in is_cleanest else f"top_weight:{top}"
            reasons[t.id] = (
                f"{why} (w={sum(parts.values()) / total:.3f}, "
                f"recoveries={int(sc.recoveries[i])}, efficiency={sc.efficiency[i]:.2f}, "
                f"diversity={sc.diversity[i]:.2f})"
            )
            sel.sft.append((t, by_traj[t.id]))
        return reasons

    def _select_rl(
        self, sel: Selection, tasks: list[Task], ix: QuotientIndex, topo: TaskTopology
    ) -> None:
        cfg = self.config
        pos = {tid: i for i, tid in enumerate(ix.task_ids)}
        eligible: list[tuple[Task, int]] = []
        for task in tasks:
            i = pos.get(task.id)
            trials = int(topo.policy_trials[i]) if i is not None else 0
            if trials == 0:
                sel.drops["rl:no_rollouts"] += 1
            elif topo.policy_passes[i] == 0:
                sel.drops["rl:zero_variance_all_failed"] += 1
            elif topo.policy_passes[i] == trials:
                sel.drops["rl:zero_variance_all_passed"] += 1
            else:
                eligible.append((task, i))
        if not eligible:
            return
        idx = np.asarray([i for _, i in eligible])
        score = topo.ebr[idx] * topo.sh[idx]
        keys = sampling_keys(score, [t.id for t, _ in eligible], cfg.seed)
        if cfg.rl_budget is None or cfg.rl_budget >= len(eligible):
            chosen = np.arange(len(eligible))
            how = "mixed_outcomes"
        else:
            chosen = top_keys(keys, cfg.rl_budget)
            how = SAMPLED
            sel.drops["rl:not_sampled"] += len(eligible) - len(chosen)
        for j in chosen:
            task, i = eligible[j]
            trials = int(topo.policy_trials[i])
            sel.rl.append(
                RLPick(
                    task,
                    float(topo.policy_passes[i] / trials),
                    trials,
                    f"{how} (ebr={topo.ebr[i]:.2f}, sh={topo.sh[i]:.2f}, ebr_sh={score[j]:.3f})",
                    key=float(keys[j]),
                )
            )

    def _stats(
        self,
        tasks: list[Task],
        trajectories: list[Trajectory],
        ix: QuotientIndex,
        topo: TaskTopology,
        sc: TrajectoryScores,
        sel: Selection,
        reasons: dict[str, str],
    ) -> dict[str, Any]:
        pol = topo.policy_trials > 0
        rates = topo.policy_passes[pol] / topo.policy_trials[pol]
        hist = Counter(round(float(r), 2) for r in rates)
        ok = ix.traj_passed
        pos = {tid: i for i, tid in enumerate(ix.traj_ids)}
        picked = np.asarray([pos[t.id] for t, _ in sel.sft], dtype=np.int64)

        def mean(x: np.ndarray) -> float:
            return round(float(x.mean()), 4) if len(x) else 0.0

        return {
            "strategy": "topology",
            "tasks": len(tasks),
            "trajectories": len(trajectories),
            "policy_pass_rate": round(
                float(topo.policy_passes.sum() / max(1, topo.policy_trials.sum())), 4
            ),
            "policy_passes": int(topo.policy_passes.sum()),
            "policy_trials": int(topo.policy_trials.sum()),
            "policy_tasks": int(pol.sum()),
            "passing_trajectories": int(ok.sum()),
            "pass_rate_histogram": {str(k): n for k, n in sorted(hist.items())},
            "sft_selected": len(sel.sft),
            "rl_selected": len(sel.rl),
            "graph_nodes": ix.n_nodes,
            "branching_nodes": int(topo.branching_nodes.sum()),
            "mean_ebr": mean(topo.ebr[pol]),
            "mean_sh": mean(topo.sh[pol]),
            "sft_pick_reasons": dict(Counter(r.split(" ")[0] for r in reasons.values())),
            "sft_recovery_rate_picked": mean((sc.recoveries[picked] > 0).astype(float)),
            "sft_recovery_rate_all_successes": mean((sc.recoveries[ok] > 0).astype(float)),
            "sft_mean_len_picked": mean(ix.traj_len[picked].astype(float)),
            "sft_mean_len_all_successes": mean(ix.traj_len[ok].astype(float)),
            "config": self.config.model_dump(),
        }



register(TopologyCurator.name, options=TopoConfig)(TopologyCurator)
