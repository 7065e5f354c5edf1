"""End to end with the embedded model: the real CPU agent through the Prefect flow."""

from __future__ import annotations

from pathlib import Path

import pytest

from data import store
from pipelines.config import load_config


@pytest.mark.slow
def test_run_flow_with_embedded_model(tmp_path: Path) -> None:
    from pipelines import flows

    cfg = load_config(None, {"synthesis.n_tasks": 2, "rollout.trials": 2, "rollout.sampling.max_tokens": 32,
                             "rollout.agent.max_turns": 3, "shard_size": 1,
                             "synthesis_mix": [{"method": "terminal", "world": "terminal", "n_tasks": 1, "seed": 2}]})
    assert cfg.rollout.model.kind == "embedded"
    summary = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    assert summary["tasks"] == 3 and summary["policy_trajectories"] == 6
    tasks = store.read_records(store.latest(tmp_path / "datasets", "tasks"))
    terminal = {t.id for t in tasks if t.world == "terminal"}
    verdicts = store.read_records(store.latest(tmp_path / "datasets", "verdicts"))
    # the embedded agent's terminal episodes are judged by the tests, run in the sandbox
    assert len([v for v in verdicts if v.task_id in terminal and v.verifier == "tests_pass"]) == 3
    trajs = store.read_records(store.latest(tmp_path / "datasets", "trajectories"))
    policy = [t for t in trajs if not t.reference]
    assert all(t.model == "embedded:SmolLM2-135M-Instruct" for t in policy)
    assert all(t.usage.model_calls >= 1 and t.usage.completion_tokens > 0 for t in policy)
    assert all(t.termination in {"user_stop", "max_turns", "transfer", "agent_stop"} for t in policy)
    for name in ("sft", "rl"):
        assert store.read_manifest(summary["releases"][name]).rows > 0
