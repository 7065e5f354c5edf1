"""bench/topocurate_check.py's RL figures on a few airline tasks: its budgeted topo draws are
the curator's own picks (the bench ended in an AssertionError when they were not)."""

from __future__ import annotations

import numpy as np

from bench.topocurate_check import group_variance, rl_figures, rollouts, sample, verify
from curation.topology import TopoConfig, TopologyCurator
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method


def test_rl_figures_on_a_few_tasks() -> None:
    tasks = get_method("logic_driven")(SynthesisConfig(n_tasks=8, seed=7), get_world("airline")).tasks
    levels = [0.3, 0.6]
    noise = {t.id: levels[i % len(levels)] for i, t in enumerate(tasks)}
    trajs = rollouts(tasks, noise, 4, seed=1)
    verdicts = verify(tasks, trajs)
    fresh = rollouts(tasks, noise, 4, seed=2)
    nonzero, nonzero_score = group_variance(fresh, verify(tasks, fresh))
    rl = rl_figures(tasks, trajs, verdicts, nonzero, nonzero_score, draws=3)
    assert rl["eligible_mixed"] >= 2 and 1 <= rl["budget"] < rl["eligible_mixed"]  # a real draw
    for key in ("nonzero_var_share_topo", "nonzero_var_share_passrate", "nonzero_var_share_passrate_band"):
        assert 0.0 <= rl[key] <= 1.0, key
    assert "rl:not_sampled" not in rl["rl_drops_topo"]  # the unbudgeted pick keeps every mixed task
    # the bench's draw at seed s is the budgeted curator's pick with that seed
    topo = TopologyCurator()
    eligible = [p.task.id for p in topo.select(tasks, trajs, verdicts).rl]
    assert topo.result is not None
    pos = {tid: i for i, tid in enumerate(topo.result.index.task_ids)}
    weights = np.asarray([topo.result.tasks.ebr[pos[t]] * topo.result.tasks.sh[pos[t]] for t in eligible])
    for seed in range(3):
        own = TopologyCurator(TopoConfig(rl_budget=rl["budget"], seed=seed)).select(tasks, trajs, verdicts)
        assert sorted(p.task.id for p in own.rl) == sorted(sample(weights, eligible, rl["budget"], seed))
