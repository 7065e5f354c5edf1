"""Cache keys of shards (`pipelines.keys`): an identical input gives the same key, and each
input that can change a shard's output (task content, model, sampling, trials, verifier
version) changes it, while where or how a run goes (name, shard size, endpoints) does not."""

from __future__ import annotations

from typing import Any

import pytest

from data.records import Task, Trajectory
from pipelines import keys
from pipelines.config import load_config
from rollout.backends import ModelConfig

SCRIPTED = {"rollout.model.kind": "scripted", "rollout.trials": 2}


def _cfg(**overrides: Any) -> Any:
    return load_config(None, {**SCRIPTED, **overrides})


def test_synthesis_key_follows_the_sources_only() -> None:
    cfg = _cfg(**{"synthesis.seed": 1})
    assert keys.synthesis_key(cfg) == keys.synthesis_key(_cfg(**{"synthesis.seed": 1}))
    assert keys.synthesis_key(cfg) != keys.synthesis_key(_cfg(**{"synthesis.seed": 2}))
    assert keys.synthesis_key(cfg) == keys.synthesis_key(cfg.model_copy(update={"name": "renamed", "shard_size": 1}))
    mixed = _cfg(**{"synthesis.seed": 1, "synthesis_mix": [{"method": "logic_driven", "world": "retail", "n_tasks": 1}]})
    assert keys.synthesis_key(mixed) != keys.synthesis_key(cfg) and len(keys.synthesis_key(cfg)) == 32


def test_rollout_key_changes_with_what_decides_the_trajectories(tasks: list[Task]) -> None:
    cfg, shard = _cfg(), tasks[:2]
    key = keys.rollout_key(cfg, shard)
    assert key == keys.rollout_key(_cfg(), list(shard))
    assert key == keys.rollout_key(cfg.model_copy(update={"name": "other", "shard_size": 7, "cache_dir": "/x"}), shard)
    edited = [shard[0].model_copy(update={"instruction": shard[0].instruction + " Quickly."}), shard[1]]
    assert keys.rollout_key(cfg, edited) != key
    assert keys.rollout_key(_cfg(**{"rollout.trials": 3}), shard) != key
    assert keys.rollout_key(_cfg(**{"rollout.sampling.temperature": 1.0}), shard) != key
    assert keys.rollout_key(_cfg(**{"reference_trials": 0}), shard) != key
    assert keys.rollout_key(_cfg(**{"rollout.model.noise": 0.3}), shard) != key


def test_model_identity_leaves_out_the_transport() -> None:
    a = ModelConfig(kind="openai", name="m", base_urls=["http://a:8000/v1"], timeout_s=5)
    b = ModelConfig(kind="openai", name="m", base_urls=["http://b:9000/v1", "http://c:9000/v1"], max_retries=9)
    assert keys.model_identity(a) == keys.model_identity(b)
    assert keys.model_identity(a) != keys.model_identity(ModelConfig(kind="openai", name="other"))
    assert keys.user_identity(_cfg().rollout) == {"kind": "scripted", "v": 1}


def test_verify_key_changes_with_the_verifiers_and_the_trajectories(tasks: list[Task],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.state import StateVerifier

    cfg = _cfg()
    by_id = {t.id: t for t in tasks}
    shard = [Trajectory(task_id=t.id, trial=0, model="m") for t in tasks[:2]]
    key = keys.verify_key(cfg, by_id, shard)
    assert key == keys.verify_key(cfg, dict(reversed(list(by_id.items()))), shard)
    assert keys.verify_key(cfg, by_id, shard[:1]) != key
    assert keys.verify_key(_cfg(verifiers=["state_equivalence"]), by_id, shard) != key
    monkeypatch.setattr(StateVerifier, "version", "9.9.9-test")
    assert keys.verify_key(cfg, by_id, shard) != key


def test_a_shard_of_tau2_tasks_keys_its_second_judge() -> None:
    """The verify key of a shard holding τ² tasks names τ²'s evaluator and its version (a part
    saved before the second judge existed is not reused without its verdicts)."""
    import pytest

    pytest.importorskip("tau2")
    from data.records import Trajectory
    from envs.registry import get_world
    from pipelines.config import RunConfig
    from pipelines.keys import verify_key
    from synthesis.base import SynthesisConfig, get_method
    from verifiers.base import VERIFIERS

    [task] = get_method("tau2")(SynthesisConfig(method="tau2", world="tau2_airline", n_tasks=1, seed=0),
                                get_world("tau2_airline")).tasks
    traj = Trajectory(id="t1", task_id=task.id, trial=0, model="m", termination="agent_stop")
    cfg = RunConfig()
    key = verify_key(cfg, {task.id: task}, [traj])
    version = VERIFIERS.get("tau2").version
    try:
        VERIFIERS.get("tau2").version = version + "-changed"
        assert verify_key(cfg, {task.id: task}, [traj]) != key
    finally:
        VERIFIERS.get("tau2").version = version
