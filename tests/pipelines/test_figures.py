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


def test_agreement_with_a_second_judge_counts_four_classes_and_the_reasons() -> None:
    """τ²'s reward beside the deciding verdict (`figures.agreement`): both pass, only τ², only
    trajforge, both fail on policy trajectories; the failing side's reasons as classes; the
    reference trajectories apart. Merged over shards, on the card and in the report."""
    from types import SimpleNamespace

    from data.card import run_sections
    from data.parts import sum_stats
    from data.records import Verdict

    cfg = load_config(None, {})
    tasks = [SimpleNamespace(id="t1"), SimpleNamespace(id="t2")]
    trajs = [SimpleNamespace(id=f"r{i}", reference=i == 0) for i in range(7)]

    def v(traj: str, task: str, name: str, passed: bool, *reasons: str) -> Verdict:
        return Verdict(trajectory_id=traj, task_id=task, verifier=name, verifier_version="1", passed=passed,
                       score=float(passed), reasons=list(reasons))

    verdicts = [
        v("r0", "t1", "composite", True), v("r0", "t1", "tau2", True),  # reference: apart
        v("r1", "t1", "composite", True), v("r1", "t1", "tau2", True),
        v("r2", "t1", "composite", False, "COMMUNICATE: claimed a change, but nothing was written: 'Done.'"),
        v("r2", "t1", "tau2", True),
        v("r3", "t2", "composite", False, "COMMUNICATE: claimed a change, but nothing was written: 'All set'"),
        v("r3", "t2", "state_equivalence", True), v("r3", "t2", "tau2", True),
        v("r4", "t2", "composite", True), v("r4", "t2", "tau2", False, "τ²: a fact to communicate was not told"),
        v("r5", "t2", "composite", False, "DB: final state differs (0/3 target cells)"),
        v("r5", "t2", "tau2", False, "τ²: database differs from the gold actions' end state"),
        v("r6", "t2", "composite", True),
        v("r6", "t2", "tau2", False, "τ²: evaluator error (ValueError)").model_copy(update={"details": {"error": "x"}}),
    ]
    got = figures.agreement(cfg, tasks, trajs, verdicts)["tau2"]  # type: ignore[arg-type]
    assert {c: got[c] for c in figures.AGREEMENT_CLASSES} == {
        "both_pass": 1, "only_second": 2, "only_deciding": 1, "both_fail": 1}
    assert got["reasons"] == {
        "only_second": {"COMMUNICATE: claimed a change, but nothing was written: …": 2},
        "only_deciding": {"τ²: a fact to communicate was not told": 1}}
    assert got["reference"] == {"judged": 1, "passed": 1} and got["errors"] == 1  # r6: left out
    assert figures.agreement(cfg, tasks, trajs, [x for x in verdicts if x.verifier != "tau2"]) == {}  # type: ignore[arg-type]
    merged = sum_stats([{"agreement": {"tau2": got}}, {"agreement": {"tau2": got}}, {}])["agreement"]["tau2"]
    assert merged["only_second"] == 4 and merged["reasons"]["only_second"] == {
        "COMMUNICATE: claimed a change, but nothing was written: …": 4}
    card = run_sections({"agreement": {"tau2": got}})
    assert "## Agreement with a second judge" in card
    assert "| τ² | 1 | 2 | 1 | 1 | 40.0% | 1/1 |" in card
    assert "| τ² | only τ² passes (trajforge's reason) | COMMUNICATE: claimed a change, but nothing was written: … | 2 |" in card
    assert "could not read (left out): τ²: 1." in card
    assert "agreement" not in run_sections({"funnel": []}).lower()
    stats = figures.agreement_stats({"agreement": {"tau2": got}})
    assert stats["agreement with tau2: share"] == 0.4 and stats["agreement with tau2: only_deciding"] == 1
    html = figures.report_html({"agreement": {"tau2": got}}, 2, {})
    assert "agreement with tau2: only_second because COMMUNICATE" in html
