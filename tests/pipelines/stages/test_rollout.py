"""The rollout stage (`pipelines.stages.rollout`): shards through the cache (an edited task
recomputes only its shard, a torn entry is a miss), reference replays past the policy's turn
limit, and the infrastructure-failure figures that stop a run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from data import store
from data.cache import ShardCache
from data.records import Trajectory, Usage
from pipelines import figures, stages
from pipelines.config import load_config


def test_changing_one_task_recomputes_only_its_shard(tmp_path: Path, tasks, count_calls: Counter,
                                                     tiny_settings: dict[str, Any]) -> None:
    cfg = load_config(None, {**tiny_settings, "reference_trials": 0})
    cache = ShardCache(tmp_path / "cache")
    shards = stages.shards(tasks[:6], 2)
    for shard in shards:
        stages.rollout_shard_cached(shard, cfg, cache)
    before = sum(count_calls.values())
    edited = [list(s) for s in shards]
    edited[1][0] = edited[1][0].model_copy(update={"instruction": edited[1][0].instruction + " Please hurry."})
    cached = [stages.rollout_shard_cached(shard, cfg, cache)[1] for shard in edited]
    assert cached == [True, False, True]
    assert sum(count_calls.values()) > before


def test_a_torn_cache_entry_is_a_miss_not_an_error(tmp_path: Path, tasks, tiny_settings: dict[str, Any]) -> None:
    cfg = load_config(None, {**tiny_settings, "reference_trials": 0})
    cache = ShardCache(tmp_path / "cache")
    first, cached = stages.rollout_shard_cached(tasks[:2], cfg, cache)
    assert not cached
    (entry,) = (tmp_path / "cache" / "rollout").rglob("*.jsonl.gz")
    entry.write_bytes(entry.read_bytes()[:40])
    again, cached = stages.rollout_shard_cached(tasks[:2], cfg, cache)
    assert not cached and cache.stats.corrupt == 1
    assert [t.id for t in again] == [t.id for t in first]


def test_the_share_of_failures_is_bounded() -> None:
    cfg = load_config(None, {})
    fine = {"policy": 100, "infra_failed": 5, "all_infra_failed": False}
    assert stages.check_infra_failures(cfg, fine)["infra_failure_rate"] == 0.05
    with pytest.raises(stages.InfraFailureError):
        stages.check_infra_failures(cfg, {**fine, "infra_failed": 6})
    with pytest.raises(stages.InfraFailureError):  # one shard fully failed, however few
        stages.check_infra_failures(cfg, {**fine, "infra_failed": 1, "all_infra_failed": True})


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
