"""What a run reports (`pipelines.figures`): the headline is the deciding verdict's pass rate
and the released rows, with warnings, stated the same in the summary, the card and the report."""

from __future__ import annotations

from data.card import headline_markdown
from pipelines import figures, stages
from pipelines.config import load_config


def test_the_headline_is_the_deciding_verdict_and_the_released_rows() -> None:
    """The default run printed policy_pass_rate 0.2812 while 0 of 16 policy rollouts passed:
    it averaged every verifier (the policy verifier passes when nothing was written)."""
    cfg = load_config(None, {})
    fig = {"tasks": {"t1": {"world": "airline", "passed": 0, "trials": 8},
                     "t2": {"world": "airline", "passed": 0, "trials": 8}},
           "trajectories": 24, "policy": 16, "rewards": {"0.0": 12, "0.5": 4},
           "summary": {"verdicts": 64, "passed": 18, "score": 20.0}}  # every verifier's: not the headline
    released = {"sft": {"rows": 36, "reference_rows": 36}, "rl": {"rows": 0}}
    head = figures.headline(cfg, fig, released)
    assert head["policy_pass_rate"] == 0.0 and head["policy_trajectories"] == 16
    assert head["mean_score"] == 0.125 and head["reference_trajectories"] == 8
    assert head["sft_rows"] == 36 and head["sft_reference_share"] == 1.0
    assert any(w.startswith("0 of 16 policy trajectories passed: every sft row is a reference") for w in head["warnings"])
    assert "the rl release has no rows" in head["warnings"]
    summary = figures.summary(2, head, {}, model_calls=24)
    assert {k: summary[k] for k in ("policy_pass_rate", "sft_rows", "sft_reference_share")} == {
        "policy_pass_rate": 0.0, "sft_rows": 36, "sft_reference_share": 1.0}
    card = headline_markdown(head, "20261206T000000000Z")
    assert "| release version | 20261206T000000000Z |" in card
    assert "| policy pass rate (deciding verdict) | 0.0 |" in card and "Warning:** 0 of 16" in card
    html = figures.report_html(fig, 2, {}, head=head, version="v1")
    assert "0 of 16 policy trajectories passed" in html and "policy_pass_rate" in html
    # the card's opening says what the rows are
    assert "all 36 rows are reference dialogues" in stages.release_summary("sft", released["sft"], 36)
    assert "from rollouts that passed" not in stages.release_summary("sft", released["sft"], 36)


def test_the_headline_counts_the_recoveries_and_any_trained_failure() -> None:
    """`sft_recovery` rows are stated beside the sft rows (summary, card, report, funnel); an
    empty `sft_recovery` is no warning, a released row whose failed turn carries loss is."""
    cfg = load_config(None, {})
    fig = {"tasks": {"t1": {"world": "airline", "passed": 1, "trials": 2}}, "trajectories": 3, "policy": 2,
           "rewards": {"1.0": 1, "0.0": 1}}
    released = {"sft": {"rows": 3, "trained_failures": 0}, "sft_recovery": {"rows": 2, "trained_failures": 0},
                "rl": {"rows": 1}}
    head = figures.headline(cfg, fig, released)
    assert (head["sft_rows"], head["sft_recovery_rows"], head["trained_failures"]) == (3, 2, 0)
    assert not head["warnings"]
    summary = figures.summary(1, head, {})
    assert (summary["sft_recovery_rows"], summary["trained_failures"]) == (2, 0)
    card = headline_markdown(head, "v1")
    assert "| sft_recovery rows released (failed turns marked `train: false`) | 2 |" in card
    assert "sft_recovery_rows" in figures.report_html(fig, 1, {}, head=head)
    none = figures.headline(cfg, fig, {**released, "sft_recovery": {"rows": 0}})
    assert none["sft_recovery_rows"] == 0 and not none["warnings"]
    bad = figures.headline(cfg, fig, {**released, "sft_recovery": {"rows": 2, "trained_failures": 1}})
    assert "1 released sft rows give loss to a failed assistant turn" in bad["warnings"]
    run = figures.run_figures(cfg, [], fig, {}, released)
    [stage] = [f for f in run["funnel"] if f["stage"].startswith("released")]
    assert stage == {"stage": "released (sft / sft_recovery / rl rows)", "count": "3 / 2 / 1", "drops": {}}
