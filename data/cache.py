"""A content-addressed store of shard results, so reruns and resumed runs skip done work.

Each entry is the records one shard of a stage produced, stored under a key computed from
everything that determines them (see `pipelines.keys`), never from a run id. An entry is
written to a temporary file and renamed into place, so a run killed mid-write leaves no
entry rather than a torn one; a reader that finds a corrupt entry treats it as a miss.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.atomic import atomic_open
from data.records import Task, Trajectory, Verdict

KINDS: dict[str, type] = {"tasks": Task, "trajectories": Trajectory, "verdicts": Verdict}


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    by_stage: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, stage: str, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)
        per = self.by_stage.setdefault(stage, {"hits": 0, "misses": 0, "corrupt": 0})
        per[outcome] += 1


class ShardCache:
    """Shard results under `root/<stage>/<key[:2]>/<key>.jsonl.gz`."""

    def __init__(self, root: Path | str, enabled: bool = True) -> None:
        self.root = Path(root)
        self.enabled = enabled
        self.stats = CacheStats()

    def _path(self, stage: str, key: str) -> Path:
        return self.root / stage / key[:2] / f"{key}.jsonl.gz"

    def get(self, stage: str, key: str, kind: str) -> list[Any] | None:
        """The records stored for `key`, or None (a miss) when absent, disabled or unreadable."""
        hit = self.get_with_meta(stage, key, kind)
        return None if hit is None else hit[0]

    def get_with_meta(self, stage: str, key: str, kind: str) -> tuple[list[Any], dict[str, Any]] | None:
        """Like `get`, with the metadata stored beside the records."""
        if not self.enabled:
            return None
        path = self._path(stage, key)
        if not path.exists():
            self.stats.count(stage, "misses")
            return None
        cls = KINDS[kind]
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                header = json.loads(f.readline())
                records = [cls.model_validate_json(line) for line in f]
            if header.get("kind") != kind or header.get("n") != len(records):
                raise ValueError("header does not match the entry")
        except (OSError, ValueError, EOFError):
            self.stats.count(stage, "corrupt")
            return None
        self.stats.count(stage, "hits")
        return records, header.get("meta") or {}

    def put(self, stage: str, key: str, kind: str, records: Sequence[Any],
            meta: dict[str, Any] | None = None) -> None:
        """Store `records` for `key` atomically (tmp file, fsync, rename)."""
        if not self.enabled:
            return
        path = self._path(stage, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb") as raw, gzip.open(raw, "wt", encoding="utf-8", compresslevel=1) as f:
            f.write(json.dumps({"kind": kind, "n": len(records), "meta": meta or {}}, default=str) + "\n")
            for r in records:
                f.write(r.model_dump_json() + "\n")

    def entries(self, stage: str | None = None) -> int:
        base = self.root / stage if stage else self.root
        return sum(1 for _ in base.rglob("*.jsonl.gz")) if base.exists() else 0
