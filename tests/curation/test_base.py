"""The curation contract: curators by name with validated options, shard stats combined,
and the order that puts a task's cleanest row first."""

from __future__ import annotations

import pytest

from curation.base import CURATORS, cleanest_first, combine_stats, failed_calls, get_curator
from curation.outcome import OutcomeCurator
from curation.topology import TopologyCurator
from data.registry import PluginOptionsError
from tests.curation.rollouts import BOOK_F1, ERR_U2, MSG, OK_U1, traj


def test_curators_by_name_with_their_options() -> None:
    assert {"outcome", "topology"} <= set(CURATORS.names())
    assert isinstance(get_curator("outcome"), OutcomeCurator)
    topo = get_curator("topology", {"sft_per_task": 2, "rl_budget": 5})
    assert isinstance(topo, TopologyCurator) and (topo.config.sft_per_task, topo.config.rl_budget) == (2, 5)
    with pytest.raises(PluginOptionsError, match="topology"):
        get_curator("topology", {"sft_per_tsak": 2})  # a typo is an error naming the curator
    with pytest.raises(PluginOptionsError, match="takes no options"):
        get_curator("outcome", {"anything": 1})
    with pytest.raises(KeyError, match="unknown curation strategy 'nope'; known: .*outcome"):
        get_curator("nope")


def test_combine_stats_adds_counts_and_recomputes_rates() -> None:
    """A ratio of counts is recomputed from the sums (not added, not averaged); a rate weighted
    by a count is the weighted mean of the shards'; names are the first shard's."""
    a = {"name": "topology", "tasks": 2, "policy_passes": 3, "policy_trials": 4, "policy_pass_rate": 0.75,
         "mean_weight": 0.5, "drops": {"rl:no_rollouts": 1}}
    b = {"name": "topology", "tasks": 1, "policy_passes": 1, "policy_trials": 4, "policy_pass_rate": 0.25,
         "mean_weight": 0.8, "drops": {"rl:no_rollouts": 2, "sft:unverified": 1}}
    out = combine_stats([a, b], {"policy_pass_rate": ("policy_passes", "policy_trials"), "mean_weight": "tasks"})
    assert out == {"name": "topology", "tasks": 3, "policy_passes": 4, "policy_trials": 8, "policy_pass_rate": 0.5,
                   "mean_weight": 0.6, "drops": {"rl:no_rollouts": 3, "sft:unverified": 1}}
    empty = combine_stats([{"policy_passes": 0, "policy_trials": 0, "mean_weight": 0.3, "tasks": 0}],
                          {"policy_pass_rate": ("policy_passes", "policy_trials"), "mean_weight": "tasks"})
    assert empty["policy_pass_rate"] == 0.0 and empty["mean_weight"] == 0.0


def test_cleanest_first_orders_by_failed_calls_then_reference_then_trial() -> None:
    noisy = traj("A", 0, [ERR_U2, OK_U1, BOOK_F1, MSG])
    late = traj("A", 3, [OK_U1, BOOK_F1, MSG])
    early = traj("A", 1, [OK_U1, BOOK_F1, MSG])
    gold = traj("A", 5, [OK_U1, BOOK_F1, MSG], reference=True)
    unparsed = traj("A", 2, [(None, {}, "bad_json", ""), (None, {}, "bad_json", "")])
    assert [failed_calls(t) for t in (noisy, late, gold, unparsed)] == [1, 0, 0, 2]
    ordered = sorted([unparsed, noisy, late, early, gold], key=cleanest_first)
    assert [t.id for t in ordered] == [gold.id, early.id, late.id, noisy.id, unparsed.id]
