"""TopoCurate on hand-built rollouts (`tests.curation.rollouts`) whose EBR, SH and
recoveries are worked out by hand in the comments; selection behaviour; zero-variance drops."""

from __future__ import annotations

import math

import numpy as np
import pytest

from curation.base import get_curator
from curation.topology import (
    TopoConfig,
    TopologyCurator,
    build_index,
    sampling_keys,
    task_topology,
    top_keys,
    trajectory_scores,
)
from tests.curation.rollouts import (
    BOOK_F1,
    ERR_U2,
    MSG,
    OK_U1,
    index,
    make_task,
    task_a,
    traj,
    verdict,
)


def test_topology_of_task_a_by_hand() -> None:
    """Task A's EBR, SH, recoveries, efficiency, diversity and weights (`task_a`'s docstring)."""
    trajs, passed = task_a()
    ix = index(trajs, passed)
    topo = task_topology(ix)
    assert topo.ebr[0] == pytest.approx(1 / 4)
    assert topo.sh[0] == pytest.approx(2 / 3)
    assert (topo.policy_trials[0], topo.policy_passes[0]) == (4, 3)
    sc = trajectory_scores(ix, TopoConfig())
    assert list(sc.recoveries) == [0, 0, 1, 0]
    assert list(sc.efficiency) == pytest.approx([1.0, 0.0, 0.75, 1.0])
    assert list(sc.diversity) == pytest.approx(
        [-math.log(2 / 3), 0.0, -math.log(1 / 3), -math.log(2 / 3)]
    )
    d = -math.log(2 / 3) / -math.log(1 / 3)
    assert sc.weight[0] == pytest.approx((0 + 1 + d) / 3)
    assert sc.weight[2] == pytest.approx((1 + 0.75 + 1) / 3)


def test_phi_drop_counts_as_setback() -> None:
    """root ─ a ─ b ✓✓ / a ─ c ─ e ✓ / a ─ c ─ f ✗✗.  Φ(a) = 4/7, Φ(c) = 2/5: a drop of 0.171,
    so with δ = 0.1 the success through c─e recovers once; with δ = 0.2 it does not.
    EBR: a (0 of 2 failing), c (f failing) → 1/4; SH: {[a,b], [a,c,e]} / 3 = 2/3."""
    t = [
        ("a", {}, None, "1"),
        ("b", {}, None, "2"),
        ("c", {}, None, "3"),
        ("e", {}, None, "4"),
        ("f", {}, None, "5"),
    ]
    a, b, c, e, f = t
    trajs = [
        traj("E", 0, [a, b]),
        traj("E", 1, [a, b]),
        traj("E", 2, [a, c, e]),
        traj("E", 3, [a, c, f]),
        traj("E", 4, [a, c, f]),
    ]
    ix = index(trajs, [True, True, True, False, False])
    assert list(trajectory_scores(ix, TopoConfig(delta=0.1)).recoveries) == [0, 0, 1, 0, 0]
    assert list(trajectory_scores(ix, TopoConfig(delta=0.2)).recoveries) == [0, 0, 0, 0, 0]
    topo = task_topology(ix)
    assert topo.ebr[0] == pytest.approx(1 / 4) and topo.sh[0] == pytest.approx(2 / 3)


def test_selection_and_drops() -> None:
    a_trajs, a_pass = task_a()
    b_trajs = [traj("B", 0, [OK_U1, MSG]), traj("B", 1, [OK_U1, MSG])]  # always passes
    c_trajs = [traj("C", 0, [ERR_U2, MSG]), traj("C", 1, [MSG])]  # never passes ...
    c_ref = traj("C", 0, [OK_U1, BOOK_F1, MSG], reference=True)  # ... but the gold path does
    unverified = traj("A", 9, [OK_U1])
    trajs = [*a_trajs, *b_trajs, *c_trajs, c_ref, unverified]
    passed = [*a_pass, True, True, False, False, True]
    verdicts = [verdict(t, p) for t, p in zip(trajs, passed, strict=False)]
    tasks = [make_task(n) for n in "ABCD"]  # D has no rollouts
    curator = get_curator("topology")
    assert isinstance(curator, TopologyCurator)
    sel = curator.select(tasks, trajs, verdicts)
    picked = [t.id for t, _ in sel.sft]
    assert picked == [
        "A-0",
        "A-2",
        "B-0",
        "C-0-ref",
    ]  # A's duplicate path A-3 and failure A-1 dropped
    assert sel.drops["sft:unverified"] == 1
    assert sel.drops["sft:failed_verification"] == 3
    assert sel.drops["sft:duplicate_path"] == 2  # A-3, B-1
    assert [p.task.id for p in sel.rl] == ["A"]
    pick = sel.rl[0]
    assert pick.pass_rate == pytest.approx(0.75) and pick.n_trials == 4
    assert (
        pick.reason.startswith("mixed_outcomes")
        and "ebr=0.25" in pick.reason
        and "sh=0.67" in pick.reason
    )
    assert sel.drops["rl:zero_variance_all_passed"] == 1
    assert sel.drops["rl:zero_variance_all_failed"] == 1  # the reference does not count for RL
    assert sel.drops["rl:no_rollouts"] == 1
    reasons = curator.result.sft_reasons
    assert set(reasons) == set(picked)
    # A-0 is A's cleanest passing row (no failed call), kept whatever its weight; the recovery
    # path takes the other place by weight; C's only passing row is its reference
    assert reasons["A-2"].startswith("top_weight:recovery") and reasons["A-0"].startswith("cleanest:policy")
    assert reasons["C-0-ref"].startswith("cleanest:reference") and sel.sft_reasons == reasons
    assert sel.stats["rl_selected"] == 1 and sel.stats["sft_selected"] == 4
    assert sel.stats["policy_pass_rate"] == round(5 / 8, 4)


def test_top_k_per_task_and_min_weight() -> None:
    trajs, passed = task_a()
    verdicts = [verdict(t, p) for t, p in zip(trajs, passed, strict=True)]
    # one place: the cleanest passing row, though the recovery path weighs more
    sel = TopologyCurator(TopoConfig(sft_per_task=1)).select([make_task("A")], trajs, verdicts)
    assert [t.id for t, _ in sel.sft] == ["A-0"] and sel.drops["sft:below_task_top_k"] == 1
    two = TopologyCurator(TopoConfig(sft_per_task=2)).select([make_task("A")], trajs, verdicts)
    assert [t.id for t, _ in two.sft] == ["A-0", "A-2"]
    assert two.sft_reasons["A-2"].startswith("top_weight:recovery")
    sel = TopologyCurator(TopoConfig(w_recovery=0, w_diversity=0, sft_per_task=2)).select(
        [make_task("A")], trajs, verdicts
    )
    assert [t.id for t, _ in sel.sft] == ["A-0", "A-2"]
    # the weight bar drops other rows, never the cleanest one
    sel = TopologyCurator(TopoConfig(min_weight=0.9)).select([make_task("A")], trajs, verdicts)
    assert [t.id for t, _ in sel.sft] == ["A-0", "A-2"] and sel.drops["sft:below_min_weight"] == 0
    sel = TopologyCurator(TopoConfig(min_weight=0.95)).select([make_task("A")], trajs, verdicts)
    assert [t.id for t, _ in sel.sft] == ["A-0"] and sel.drops["sft:below_min_weight"] == 1


def test_the_reference_wins_among_duplicates_and_over_noisy_rows() -> None:
    gold = traj("A", 0, [OK_U1, BOOK_F1, MSG], reference=True)
    same = traj("A", 1, [OK_U1, BOOK_F1, MSG])  # the same path as the reference
    noisy = traj("A", 2, [ERR_U2, OK_U1, BOOK_F1, MSG])
    trajs = [same, noisy, gold]
    verdicts = [verdict(t, True) for t in trajs]
    for curator in (TopologyCurator(TopoConfig(sft_per_task=1)), get_curator("outcome")):
        sel = curator.select([make_task("A")], trajs, verdicts)
        kept = [t.id for t, _ in sel.sft]
        assert kept[0] == gold.id and same.id not in kept, (curator.name, kept)
        assert sel.sft_reasons[gold.id]
    # the outcome curator keeps the recovery row too: its failed call makes it no duplicate
    assert noisy.id in [t.id for t, _ in get_curator("outcome").select([make_task("A")], trajs, verdicts).sft]


def test_rl_budget_samples_in_proportion_to_ebr_sh() -> None:
    # the curator's sampler: keys from each item's id and the seed, the largest kept
    counts = np.zeros(3)
    for seed in range(4000):
        keys = sampling_keys(np.array([1.0, 0.0, 3.0]), ["a", "b", "c"], seed)
        counts[top_keys(keys, 1)[0]] += 1
    assert counts[1] == 0
    assert counts[2] / counts.sum() == pytest.approx(0.75, abs=0.03)
    # an item's key does not depend on its position (shards keep the largest keys over all)
    keys = sampling_keys(np.array([1.0, 2.0]), ["a", "c"], 5)
    assert keys[1] == sampling_keys(np.array([0.5, 2.0, 1.0]), ["x", "c", "a"], 5)[1]
    # budgeted selection drops the rest with a counted reason
    trajs, passed = task_a()
    e = [traj("E", i, [ERR_U2, OK_U1, MSG] if i % 2 else [OK_U1, MSG]) for i in range(4)]
    all_t = trajs + e
    verdicts = [
        verdict(t, p) for t, p in zip(all_t, passed + [True, False, True, False], strict=True)
    ]
    sel = TopologyCurator(TopoConfig(rl_budget=1)).select([make_task("A"), make_task("E")], all_t, verdicts)
    assert len(sel.rl) == 1 and sel.drops["rl:not_sampled"] == 1
    assert sel.rl[0].reason.startswith("sampled_by_ebr_sh")


def test_bad_config_and_missing_verdict() -> None:
    with pytest.raises(ValueError, match="sft_per_task"):
        TopoConfig(sft_per_task=0)
    with pytest.raises(ValueError, match="weights"):
        TopoConfig(w_recovery=0, w_efficiency=0, w_diversity=0)
    with pytest.raises(ValueError, match="no verdict"):
        build_index([traj("A", 0, [OK_U1])], {})
    sel = get_curator("topology").select([make_task("A")], [], [])
    assert sel.sft == [] and sel.rl == [] and sel.drops["rl:no_rollouts"] == 1

