"""bench/tau2_agreement.py on one retail task: its references score τ²'s 1.0, its state
mutants fail both judges, and the agreement figures add up."""

from __future__ import annotations

import pytest

pytest.importorskip("tau2")


@pytest.mark.slow  # about a minute: τ²'s evaluator loads its database per judgement
def test_tau2_agreement_on_one_task() -> None:
    from bench.tau2_agreement import domain_figures

    fig = domain_figures("retail", n=1, seed=0, noise=0.0, trials=1)
    assert fig["tasks"] == 1 and fig["reference_tau2_reward_1"] == 1.0 and fig["near_test"] == 0
    agree = fig["agreement"]
    counted = sum(agree[k] for k in ("both_pass", "only_second", "only_deciding", "both_fail"))
    assert counted == fig["policy_trajectories"] + fig["mutant_trajectories"]
    # a mutant may reach the gold's state (a repeated write that τ² refuses): both then pass it
    assert fig["mutant_trajectories"] >= 3 and agree["both_fail"] >= 3 and agree["only_deciding"] == 0
