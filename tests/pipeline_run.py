"""A scripted run up to its curated datasets through the plain stages (no Prefect), for
tests that need real curated or released rows."""

from __future__ import annotations

from pathlib import Path

from curation.base import Selection
from data import store
from data.records import Task
from pipelines import stages
from pipelines.config import RunConfig


def curated_run(cfg: RunConfig, out: Path, shard_size: int = 4) -> tuple[list[Task], Selection, dict[str, Path]]:
    """Synthesize, roll out shard by shard, verify, curate and write the curated datasets:
    the tasks, the selection and the curated paths."""
    tp = stages.synthesize(cfg, out)
    tasks = store.read_records(tp)
    trajectories = [t for shard in stages.shards(tasks, shard_size) for t in stages.rollout_shard(shard, cfg)]
    verdicts = stages.verify_shard({t.id: t for t in tasks}, trajectories, cfg.verifiers)
    selection = stages.curate(cfg, tasks, trajectories, verdicts)
    return tasks, selection, stages.write_curated(cfg, out, selection, tasks, [tp])
