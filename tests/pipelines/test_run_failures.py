"""A run that fails says so (issue 34): infrastructure failures are never data (recorded,
never cached, not judged, the run stopped), the endpoint is checked before rollout, and the
report's pass@k axis. The failure figures and reference replays: `stages/test_rollout.py`;
the headline the summary, card and report share: `test_figures.py`."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from data import parts, store
from pipelines import sharded, stages
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


def test_pass_at_k_is_drawn_on_integer_k() -> None:
    from data.report import ReportFigures, _plots

    plots = dict(_plots(ReportFigures(pass_at_k={1: 0.5, 2: 0.6, 3: 0.8}, pass_hat_k={1: 0.5, 2: 0.3, 3: 0.1})))
    svg = next(v for k, v in plots.items() if k.startswith("pass@k"))
    assert ">1.25<" not in svg and ">1.5<" not in svg and ">2.5<" not in svg
    assert ">2<" in svg
