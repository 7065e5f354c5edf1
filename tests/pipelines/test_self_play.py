"""The self-play round loop through Prefect with the embedded model (real GRPO steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data import store
from pipelines.config import load_config


@pytest.mark.slow
def test_two_rounds_chain_models_and_releases(tmp_path: Path) -> None:
    from pipelines import flows

    cfg = load_config(None, {
        "self_play.rounds": 2, "self_play.n_candidates": 2, "self_play.generator_max_tokens": 96,
        "self_play.solver_max_tokens": 32, "self_play.generator.max_completion_length": 48,
        "self_play.solver.max_completion_length": 32,
    })
    rounds = flows.self_play_flow(cfg.model_dump(mode="json"), str(tmp_path))
    assert [r["round"] for r in rounds] == [0, 1]
    for r in rounds:
        assert Path(r["generator"], "model.safetensors").exists() and Path(r["solver"], "model.safetensors").exists()
        c = r["counts"]
        assert c["generated"] == 2 and c["generated"] >= c["valid"] >= c["kept"]
        assert r["tasks"] >= cfg.self_play.min_solver_tasks
        assert set(r["bands"]) == {"easy", "medium", "hard"} and r["frozen_solver"] == {"kind": "embedded"}
        assert sum(r["bands"].values()) + r["scripted_top_up"] == r["tasks"]
        assert len(r["generator_rewards"]) == cfg.self_play.generator.max_steps == 1
        assert len(r["solver_rewards"]) == cfg.self_play.solver.max_steps == 1
    first, second = (store.read_manifest(r["release"]) for r in rounds)
    assert first.lineage.parents == [] and second.lineage.parents == [rounds[0]["release"]]
    assert second.stats["round"] == 1
    tasks = store.read_records(rounds[1]["release"], "tasks")
    assert all(t.method == "self_play" for t in tasks)
    summary = json.loads((tmp_path / "self_play" / "round-1" / "round_summary.json").read_text())
    assert summary["solver"] == rounds[1]["solver"]
