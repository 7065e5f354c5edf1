"""Shared by the stage tests (plain stages, no Prefect; each built once per session): a tiny
scripted run's settings and that run up to its curated datasets, and a smaller run's
records and datasets (tasks, trajectories, verdicts) with its selection."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from curation.base import Selection
from data import store
from data.records import Task, Trajectory, Verdict
from pipelines import stages
from pipelines.config import RunConfig, load_config
from tests.pipeline_run import curated_run

TINY: dict[str, Any] = {"synthesis.n_tasks": 6, "synthesis.seed": 3, "rollout.model.kind": "scripted",
                        "rollout.model.noise": 0.4, "rollout.trials": 2, "shard_size": 2}


@pytest.fixture
def tiny_settings() -> dict[str, Any]:
    """The tiny run's `--set` overrides (a fresh dict: add to it freely)."""
    return dict(TINY)


@pytest.fixture(scope="session")
def curated(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, Path, Selection, list[Task], dict[str, Path]]:
    """A tiny scripted run up to its curated datasets (plain stages, no Prefect): the config,
    its out folder, the selection and tasks (to curate again) and the curated paths."""
    cfg = load_config(None, TINY)
    out = tmp_path_factory.mktemp("curated")
    tasks, selection, paths = curated_run(cfg, out, shard_size=2)
    return cfg, out, selection, tasks, paths


@dataclass(frozen=True)
class SmallRun:
    """Two airline tasks, one scripted trial each plus the gold replays, judged and curated;
    `paths` holds the committed `tasks`, `trajectories` and `verdicts` datasets."""

    cfg: RunConfig
    out: Path
    tasks: list[Task]
    trajectories: list[Trajectory]
    verdicts: list[Verdict]
    selection: Selection
    paths: dict[str, Path]


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> SmallRun:
    cfg = load_config(None, {"synthesis.n_tasks": 2, "synthesis.seed": 3, "rollout.model.kind": "scripted",
                             "rollout.model.noise": 0.5, "rollout.trials": 1})
    out = tmp_path_factory.mktemp("small-run")
    tp = stages.synthesize(cfg, out)
    tasks = store.read_records(tp)
    trajectories = stages.rollout_shard(tasks, cfg)
    trp = stages.write_trajectories(trajectories, cfg, out, [tp])
    verdicts = stages.verify_shard({t.id: t for t in tasks}, trajectories, cfg.verifiers)
    vp = stages.write_verdicts(verdicts, cfg, out, [tp, trp])
    selection = stages.curate(cfg, tasks, trajectories, verdicts)
    return SmallRun(cfg, out, tasks, trajectories, verdicts, selection, {"tasks": tp, "trajectories": trp, "verdicts": vp})
