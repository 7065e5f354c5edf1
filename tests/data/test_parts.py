"""Shard parts: a part written under its content key is found again only while it is
complete and intact; its rows read back in bounded batches; shard figures add up."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from data import parts
from data.records import Verdict
from data.schema import CODECS


def _verdicts(n: int) -> list[Verdict]:
    return [Verdict(trajectory_id=f"t{i}", task_id=f"k{i // 2}", verifier="v", verifier_version="1",
                    passed=i % 3 == 0, score=float(i % 3 == 0)) for i in range(n)]


def test_write_find_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parts, "ROW_GROUP_ROWS", 2)
    ref = parts.write_records(tmp_path, "verify", "ab12cd", "verdicts", _verdicts(5), meta={"passed": 2})
    assert ref.path == str(tmp_path / "verify" / "ab" / "ab12cd.parquet") and ref.rows == 5 and not ref.cached
    assert ref.sha256 == parts.sha256_of(ref.path) and ref.meta == {"passed": 2}
    side = json.loads((tmp_path / "verify" / "ab" / "ab12cd.json").read_text())
    assert side == {"rows": 5, "sha256": ref.sha256, "meta": {"passed": 2}}
    assert sorted(p.name for p in Path(ref.path).parent.iterdir()) == ["ab12cd.json", "ab12cd.parquet"]
    assert parts.open_part(ref.path).metadata.num_row_groups == 3  # row groups of at most ROW_GROUP_ROWS
    found = parts.find(tmp_path, "verify", "ab12cd")
    assert found == parts.PartRef(ref.path, 5, {"passed": 2}, cached=True, sha256=ref.sha256)
    assert parts.read_records(found, "verdicts") == _verdicts(5)  # type: ignore[arg-type]
    batches = list(parts.iter_batches(ref, columns=["trajectory_id", "passed"], batch_rows=2))
    assert [b.num_rows for b in batches] == [2, 2, 1] and batches[0].column_names == ["trajectory_id", "passed"]
    assert [r["trajectory_id"] for b in batches for r in b.to_pylist()] == [f"t{i}" for i in range(5)]
    assert parts.find(tmp_path, "verify", "ffffff") is None and parts.find(tmp_path, "rollout", "ab12cd") is None
    parts.remove(ref)
    assert not Path(ref.path).parent.joinpath("ab12cd.json").exists() and not Path(ref.path).exists()
    assert parts.find(tmp_path, "verify", "ab12cd") is None


def test_altered_torn_or_incomplete_parts_are_not_found(tmp_path: Path) -> None:
    ref = parts.write_records(tmp_path, "verify", "aa01", "verdicts", _verdicts(4))
    data = Path(ref.path).read_bytes()
    Path(ref.path).write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])  # one flipped bit
    assert parts.find(tmp_path, "verify", "aa01") is None
    with pytest.raises(parts.CorruptPartError, match="altered after it was written"):
        parts.verify(ref)
    with pytest.raises(parts.CorruptPartError):
        next(parts.iter_batches(ref))
    parts.verify(parts.PartRef(ref.path, 4))  # a ref without a checksum is not checked
    Path(ref.path).write_bytes(data)
    parts.verify(ref)
    assert parts.find(tmp_path, "verify", "aa01") is not None
    side = Path(ref.path).with_suffix(".json")
    side.write_text(json.dumps({"rows": 3, "sha256": ref.sha256, "meta": {}}))  # the sidecar's count differs
    assert parts.find(tmp_path, "verify", "aa01") is None
    side.unlink()  # killed before its sidecar: absent
    assert parts.find(tmp_path, "verify", "aa01") is None
    failed = parts.write_records(tmp_path, "rollout", "bb02", "verdicts", _verdicts(1), meta={"incomplete": True})
    assert failed.rows == 1 and parts.find(tmp_path, "rollout", "bb02") is None


def test_a_url_root_holds_parts_too(tmp_path: Path) -> None:
    root = f"file://{tmp_path}/shared"
    assert parts.is_url(root) and not parts.is_url(tmp_path)
    schema = CODECS["verdicts"][0]
    rows = [CODECS["verdicts"][1](v) for v in _verdicts(3)]
    ref = parts.write(root, "verify", "cc03", schema, [pa.Table.from_pylist(rows[:2], schema),
                                                       pa.Table.from_pylist(rows[2:], schema)])
    assert ref.path == f"{root}/verify/cc/cc03.parquet" and ref.rows == 3
    found = parts.find(root, "verify", "cc03")
    assert found is not None and found.sha256 == ref.sha256 == parts.sha256_of(str(tmp_path / "shared/verify/cc/cc03.parquet"))
    assert parts.read_records(found, "verdicts") == _verdicts(3)
    parts.remove(found)
    assert parts.find(root, "verify", "cc03") is None and not (tmp_path / "shared/verify/cc/cc03.json").exists()


def test_sum_stats_adds_numbers_merges_dicts_and_keeps_names() -> None:
    a = {"n": 2, "rate": 0.5, "ok": False, "by": {"x": 1, "deep": {"y": 1}}, "examples": [1, 2], "name": "outcome"}
    b = {"n": 3, "rate": 0.25, "ok": True, "by": {"x": 2, "z": 4, "deep": {"y": 2}}, "examples": [3, 4],
         "name": "topology", "extra": [5]}
    assert parts.sum_stats([a, b], max_list=3) == {
        "n": 5, "rate": 0.75, "ok": True, "by": {"x": 3, "z": 4, "deep": {"y": 3}}, "examples": [1, 2, 3],
        "name": "outcome", "extra": [5],
    }
    assert parts.sum_stats([]) == {} and parts.sum_stats([{"n": 1}, {"n": "two"}]) == {"n": 1}  # a clash keeps the first
    assert a == {"n": 2, "rate": 0.5, "ok": False, "by": {"x": 1, "deep": {"y": 1}}, "examples": [1, 2],
                 "name": "outcome"}  # the inputs are not modified
