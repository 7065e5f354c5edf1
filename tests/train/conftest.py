"""Shared by the training tests: real `sft` and `rl` releases from the scripted pipeline,
a tiny random model with the embedded model's tokenizer, and a run's metric lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.tiny_model import make_tiny_model
from train.data import load_release


@pytest.fixture(scope="session")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real `sft` and `rl` releases from the scripted pipeline (noise 0.6: some tasks fail)."""
    from pipelines import stages
    from pipelines.config import load_config

    cfg = load_config(None, {"rollout.model.kind": "scripted", "rollout.model.noise": 0.6,
                             "rollout.trials": 3, "synthesis.n_tasks": 8})
    from tests.pipeline_run import curated_run

    out = tmp_path_factory.mktemp("trainrel")
    paths = stages.release(cfg, out, curated_run(cfg, out)[2])
    assert load_release(paths["sft"], "train").num_rows > 0 and load_release(paths["sft"], "test").num_rows > 0
    assert load_release(paths["rl"], "train").num_rows > 0
    return paths


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def metric_lines() -> Callable[[Path], list[dict[str, Any]]]:
    """A run folder's `metrics.jsonl`, one dict a line."""

    def read(out: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    return read
