"""What every stage shares: where datasets and releases go, lineage, the shard cache,
sharding, the release kinds and their schemas, and the crash points resume tests cut at."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from data import store
from data.cache import ShardCache
from data.schema import RL_SCHEMA, SFT_RECOVERY_SCHEMA, SFT_SCHEMA
from pipelines.config import RunConfig

T = TypeVar("T")
# The release configs of one version: `sft` (conversations without a failed assistant turn),
# `sft_recovery` (recoveries, each failed assistant turn marked `train: false`; published even
# when empty, so every version has the same configs) and `rl`.
RELEASES = ("sft", "sft_recovery", "rl")
SCHEMAS = {"sft": SFT_SCHEMA, "sft_recovery": SFT_RECOVERY_SCHEMA, "rl": RL_SCHEMA}


def datasets_dir(out: Path) -> Path:
    return Path(out) / "datasets"


def releases_dir(out: Path) -> Path:
    return Path(out) / "releases"


def shard_cache(cfg: RunConfig, out: Path) -> ShardCache:
    """The run's shard cache (`<out>/cache` unless `cache_dir` is set)."""
    return ShardCache(Path(cfg.cache_dir) if cfg.cache_dir else Path(out) / "cache", enabled=cfg.cache)


def lineage(cfg: RunConfig, parents: Sequence[Path | str], run_id: str = "") -> store.Lineage:
    return store.Lineage(config_hash=cfg.config_hash(), code_version=store.code_version(),
                         parents=[str(p) for p in parents], run_id=run_id)


def shards(items: Sequence[T], size: int) -> list[list[T]]:
    size = max(1, size)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def crashpoint(name: str) -> None:
    """`data.crash.crashpoint`, looked up on the `pipelines.stages` package at each call, so a
    test that patches `pipelines.stages.crashpoint` cuts every stage there."""
    import pipelines.stages

    pipelines.stages.crashpoint(name)
