"""What every stage shares (`pipelines.stages.base`): where datasets, releases and the cache
go, the lineage a stage writes, sharding, and crash points looked up on the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from data import store
from pipelines import stages
from pipelines.config import RunConfig, load_config
from pipelines.stages import base


def test_shards_keep_order_and_leave_no_empty_shard() -> None:
    assert base.shards(list(range(5)), 2) == [[0, 1], [2, 3], [4]]
    assert base.shards("abc", 5) == [["a", "b", "c"]]
    assert base.shards([1, 2], 0) == [[1], [2]]  # a size below 1 is 1
    assert base.shards([], 3) == []


def test_lineage_names_the_config_the_code_and_the_parents(tmp_path: Path) -> None:
    cfg = load_config(None, {"synthesis.n_tasks": 3})
    lin = base.lineage(cfg, [tmp_path / "tasks" / "v1", "elsewhere"], run_id="run-1")
    assert lin.config_hash == cfg.config_hash() != RunConfig().config_hash()
    assert lin.parents == [str(tmp_path / "tasks" / "v1"), "elsewhere"] and lin.run_id == "run-1"
    assert lin.code_version == store.code_version()


def test_where_datasets_releases_and_the_cache_go(tmp_path: Path) -> None:
    assert base.datasets_dir(tmp_path) == tmp_path / "datasets"
    assert base.releases_dir(str(tmp_path)) == tmp_path / "releases"
    cache = base.shard_cache(RunConfig(), tmp_path)
    assert cache.root == tmp_path / "cache" and cache.enabled
    moved = RunConfig().model_copy(update={"cache_dir": str(tmp_path / "shared"), "cache": False})
    cache = base.shard_cache(moved, tmp_path)
    assert cache.root == tmp_path / "shared" and not cache.enabled
    assert base.SCHEMAS["sft"].names != base.SCHEMAS["rl"].names and base.RELEASES == ("sft", "sft_recovery", "rl")
    assert base.SCHEMAS["sft_recovery"].names == base.SCHEMAS["sft"].names  # the marks live inside `messages`


def test_crashpoints_go_through_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(stages, "crashpoint", seen.append)
    base.crashpoint("rollout.shard_done")
    assert seen == ["rollout.shard_done"]
