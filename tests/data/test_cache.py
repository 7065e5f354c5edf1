"""The shard cache: records stored under a content key come back as they went in; a missing,
corrupt or mismatched entry is a counted miss, never an error."""

from __future__ import annotations

import gzip
from pathlib import Path

from data.cache import ShardCache
from data.records import Verdict


def _verdicts(n: int) -> list[Verdict]:
    return [Verdict(trajectory_id=f"t{i}", task_id="k", verifier="v", verifier_version="1", passed=i % 2 == 0,
                    score=float(i % 2 == 0), reasons=[] if i % 2 == 0 else ["DB: wrong"]) for i in range(n)]


def test_put_then_get_round_trips_records_and_meta(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path)
    assert cache.get("verify", "ab12", "verdicts") is None  # a miss
    cache.put("verify", "ab12", "verdicts", _verdicts(3), meta={"seconds": 1.5})
    path = tmp_path / "verify" / "ab" / "ab12.jsonl.gz"
    assert path.is_file() and [p.name for p in path.parent.iterdir()] == ["ab12.jsonl.gz"]  # no temporary left
    records, meta = cache.get_with_meta("verify", "ab12", "verdicts")  # type: ignore[misc]
    assert records == _verdicts(3) and meta == {"seconds": 1.5}
    assert cache.get("verify", "ab12", "verdicts") == _verdicts(3)
    cache.put("verify", "cd34", "verdicts", [])
    assert cache.get("verify", "cd34", "verdicts") == []  # an empty shard is a hit too
    assert (cache.stats.hits, cache.stats.misses, cache.stats.corrupt) == (3, 1, 0)
    assert cache.stats.by_stage == {"verify": {"hits": 3, "misses": 1, "corrupt": 0}}
    assert cache.entries() == 2 and cache.entries("verify") == 2 and cache.entries("rollout") == 0


def test_corrupt_or_mismatched_entries_are_misses(tmp_path: Path) -> None:
    cache = ShardCache(tmp_path)
    cache.put("verify", "aa01", "verdicts", _verdicts(4))
    path = tmp_path / "verify" / "aa" / "aa01.jsonl.gz"
    assert cache.get("verify", "aa01", "trajectories") is None  # stored as another kind
    path.write_bytes(path.read_bytes()[:-20])  # a torn gzip
    assert cache.get("verify", "aa01", "verdicts") is None
    with gzip.open(path, "wt") as f:  # fewer records than the header says
        f.write('{"kind": "verdicts", "n": 4, "meta": {}}\n' + _verdicts(1)[0].model_dump_json() + "\n")
    assert cache.get("verify", "aa01", "verdicts") is None
    assert (cache.stats.hits, cache.stats.corrupt) == (0, 3)


def test_a_disabled_cache_neither_reads_nor_writes(tmp_path: Path) -> None:
    ShardCache(tmp_path).put("verify", "ab12", "verdicts", _verdicts(2))
    off = ShardCache(tmp_path, enabled=False)
    assert off.get("verify", "ab12", "verdicts") is None
    off.put("verify", "ef56", "verdicts", _verdicts(1))
    assert off.entries() == 1 and (off.stats.hits, off.stats.misses) == (0, 0)
