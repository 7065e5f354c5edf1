"""A run that fails says so (issue 34): infrastructure failures are never data, the endpoint
is checked before rollout, reference replays ignore the policy's turn limit, and the
summary, the card and the report state one set of numbers."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from data import parts, store
from data.card import headline_markdown
from data.records import Trajectory, Usage
from pipelines import figures, sharded, stages
from pipelines.config import load_config
from rollout.backends import ModelConfig
from rollout.preflight import PreflightError, check_model
from tests.fakes.lean_server import LeanServer

FAST: dict[str, Any] = {"timeout_s": 0.5, "max_retries": 1, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
                        "breaker_failures": 50, "breaker_cooldown_s": 0.1}


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens once the socket is closed


def _openai_cfg(url: str, **extra: Any) -> Any:
    return load_config(None, {"synthesis.n_tasks": 4, "synthesis.seed": 3, "rollout.trials": 2, "shard_size": 2,
                              "rollout.model": {"kind": "openai", "name": "m", "base_urls": [url], **FAST},
                              "rollout.agent.max_turns": 3, **extra})


def test_preflight_names_a_dead_endpoint_and_a_wrong_model() -> None:
    dead = _dead_url()
    with pytest.raises(PreflightError, match="no model server answers at"):
        check_model(ModelConfig(kind="openai", name="m", base_urls=[dead], **FAST))
    with LeanServer(model="m") as srv:
        check_model(ModelConfig(kind="openai", name="m", base_urls=[srv.base_url]))
        with pytest.raises(PreflightError, match=r"does not serve model 'other' \(it serves: m\)"):
            check_model(ModelConfig(kind="openai", name="other", base_urls=[srv.base_url]))
    check_model(ModelConfig(kind="scripted"))  # nothing remote: nothing to check


def test_failed_rollouts_are_recorded_never_cached_and_fail_the_run(tmp_path: Path) -> None:
    dead = _dead_url()
    cfg = _openai_cfg(dead)
    tasks = store.read_records(stages.synthesize(cfg, tmp_path))[:2]
    ref = sharded.rollout_part(tasks, cfg, tmp_path)
    trajectories = parts.read_records(ref, "trajectories")
    policy = [t for t in trajectories if not t.reference]
    assert policy and all(t.infra_failed and t.termination == "model_error" for t in policy)
    assert all(not t.infra_failed for t in trajectories if t.reference)
    assert ref.meta["incomplete"] and ref.meta["all_infra_failed"] and ref.meta["model_calls"] == 0
    assert parts.find(sharded.parts_dir(cfg, tmp_path), "rollout", Path(ref.path).stem) is None, \
        "a failed shard was cached as done"
    with pytest.raises(stages.InfraFailureError, match=r"4 of 4 policy trajectories ended on infrastructure"):
        stages.check_infra_failures(cfg, ref.meta)
    allowed = cfg.model_copy(update={"failures": cfg.failures.model_copy(update={"allow_partial": True})})
    assert stages.check_infra_failures(allowed, ref.meta)["infra_failure_rate"] == 1.0
    # failed trajectories are no one's behaviour: not judged
    verdicts = parts.read_records(sharded.verify_part(tasks, ref, cfg, tmp_path), "verdicts")
    assert {v.trajectory_id for v in verdicts} <= {t.id for t in trajectories if t.reference}


def test_the_share_of_failures_is_bounded() -> None:
    cfg = load_config(None, {})
    fine = {"policy": 100, "infra_failed": 5, "all_infra_failed": False}
    assert stages.check_infra_failures(cfg, fine)["infra_failure_rate"] == 0.05
    with pytest.raises(stages.InfraFailureError):
        stages.check_infra_failures(cfg, {**fine, "infra_failed": 6})
    with pytest.raises(stages.InfraFailureError):  # one shard fully failed, however few
        stages.check_infra_failures(cfg, {**fine, "infra_failed": 1, "all_infra_failed": True})


def test_a_dead_endpoint_fails_the_run_and_publishes_nothing(tmp_path: Path) -> None:
    from pipelines import flows

    cfg = _openai_cfg(_dead_url())
    with pytest.raises(PreflightError, match="no model server answers"):
        flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    assert not (tmp_path / "datasets").exists(), "the preflight check comes before synthesis"
    no_check = cfg.model_copy(update={"failures": cfg.failures.model_copy(update={"preflight": False})})
    with pytest.raises(stages.InfraFailureError):
        flows.run_flow(no_check.model_dump(mode="json"), str(tmp_path))
    assert store.read_pointer(tmp_path / "releases") is None
    assert not store.versions(tmp_path / "releases", "sft")
    assert not store.versions(tmp_path / "datasets", "trajectories")


def test_reference_replays_ignore_max_turns(tmp_path: Path) -> None:
    cfg = load_config(None, {"synthesis.n_tasks": 3, "synthesis.seed": 3, "rollout.model.kind": "scripted",
                             "rollout.trials": 1, "rollout.agent.max_turns": 2})
    tasks = store.read_records(stages.synthesize(cfg, tmp_path))
    gold = [t for t in stages.rollout_shard(tasks, cfg) if t.reference]
    assert gold and all(t.termination != "max_turns" for t in gold)
    assert any(t.usage.model_calls > 2 for t in gold)
    verdicts = stages.verify_shard({t.id: t for t in tasks}, gold, cfg.verifiers)
    decided = figures.deciding_verdicts(cfg, tasks, verdicts)
    assert decided and all(v.passed for v in decided)


def _traj(task_id: str, reference: bool = False, calls: int = 3) -> Trajectory:
    return Trajectory(task_id=task_id, trial=0, model="m", reference=reference,
                      usage=Usage(model_calls=calls)).model_copy(update={"id": f"{task_id}-{reference}"})


def test_model_calls_count_only_the_policy() -> None:
    stats = stages.trajectory_stats([_traj("a"), _traj("a", reference=True, calls=9)])
    assert stats["model_calls"] == 3 and stats["policy"] == 1 and stats["infra_failed"] == 0


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


def test_pass_at_k_is_drawn_on_integer_k() -> None:
    from data.report import ReportFigures, _plots

    plots = dict(_plots(ReportFigures(pass_at_k={1: 0.5, 2: 0.6, 3: 0.8}, pass_hat_k={1: 0.5, 2: 0.3, 3: 0.1})))
    svg = next(v for k, v in plots.items() if k.startswith("pass@k"))
    assert ">1.25<" not in svg and ">1.5<" not in svg and ">2.5<" not in svg
    assert ">2<" in svg
