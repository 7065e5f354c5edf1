"""Dataset store: atomic commits, manifests, refusal of bad datasets, DuckDB and datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from data import store
from data.records import Sampling, Step, ToolCall, Trajectory, Usage, Verdict
from data.schema import SFT_SCHEMA, normalize_message

LIN = store.Lineage(config_hash="abc", code_version="test", parents=["p1"])


def _traj(i: int) -> Trajectory:
    return Trajectory(
        id=f"traj-{i}", task_id="task-1", trial=i, model="m", sampling=Sampling(seed=i),
        messages=[{"role": "user", "content": "hi"},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
                  {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "{}"}],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        steps=[Step(index=0, turn=1, action=ToolCall(name="f", arguments={"a": 1}), observation="{}",
                    state_hash="h")],
        usage=Usage(prompt_tokens=3, completion_tokens=4, model_calls=1), termination="user_stop",
        error_counts={"bad_json": 1}, final_state_hash="h", metadata={"x": [1, 2]},
    )


def test_records_roundtrip_through_parquet(tmp_path: Path) -> None:
    trajs = [_traj(i) for i in range(3)]
    path = store.write_records(tmp_path, "trajectories", "trajectories", trajs, LIN, shard_rows=2)
    manifest = store.read_manifest(path)
    assert manifest.rows == 3 and len(manifest.files) == 2
    assert [f.rows for f in manifest.files] == [2, 1]
    assert manifest.lineage.parents == ["p1"] and manifest.schema_version == trajs[0].schema_version
    back = store.read_records(path, "trajectories")
    assert [t.model_dump() for t in back] == [t.model_dump() for t in trajs]


def test_commit_is_atomic_and_versions_are_immutable(tmp_path: Path) -> None:
    w = store.DatasetWriter(tmp_path, "sft", "sft", SFT_SCHEMA, 1, version="v1")
    w.write_rows([])
    assert not (tmp_path / "sft" / "v1").exists()  # nothing visible before commit
    assert store.versions(tmp_path, "sft") == []
    w.commit(LIN)
    assert (tmp_path / "sft" / "v1" / "_SUCCESS").exists()
    assert not [p for p in (tmp_path / "sft").iterdir() if p.name.startswith(".staging")]
    with pytest.raises(store.DatasetError, match="already exists"):
        store.DatasetWriter(tmp_path, "sft", "sft", SFT_SCHEMA, 1, version="v1")


def test_aborted_writer_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), store.DatasetWriter(tmp_path, "x", "verdicts", pa.schema([("a", pa.int64())]), 1) as w:
        w.write_rows([{"a": 1}])
        raise RuntimeError("killed mid-write")
    assert list((tmp_path / "x").iterdir()) == []


def test_readers_refuse_incomplete_and_corrupted(tmp_path: Path) -> None:
    path = store.write_records(tmp_path, "trajectories", "trajectories", [_traj(0)], LIN)
    (path / "_SUCCESS").unlink()
    with pytest.raises(store.DatasetError, match="incomplete"):
        store.read_table(path)
    (path / "_SUCCESS").write_text("x")
    part = path / "data" / "part-00000.parquet"
    part.write_bytes(part.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(store.DatasetError, match="checksum mismatch"):
        store.read_records(path)
    with pytest.raises(store.DatasetError, match="no dataset"):
        store.read_manifest(tmp_path / "missing")


def test_duckdb_and_hf_datasets_read_a_release(tmp_path: Path) -> None:
    rows = [{"messages": [normalize_message(m) for m in _traj(i).messages], "tools": json.dumps(_traj(i).tools),
             "task_id": "task-1", "trajectory_id": f"traj-{i}", "world": "airline", "method": "logic_driven",
             "model": "m", "trial": i, "score": 1.0, "split": "train" if i else "test"} for i in range(3)]
    with store.DatasetWriter(tmp_path, "sft", "sft", SFT_SCHEMA, 1) as w:
        w.write_rows(rows)
        path = w.commit(LIN)
    got = store.query("select split, count(*) as n from sft group by split order by split", sft=path).to_pylist()
    assert got == [{"split": "test", "n": 1}, {"split": "train", "n": 2}]

    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=str(path / "data" / "*.parquet"), split="train")
    assert ds.num_rows == 3
    call = ds[0]["messages"][1]["tool_calls"][0]
    assert call["function"]["arguments"] == {"a": 1}  # JSON-typed: datasets yields the object
    assert ds[0]["tools"][0]["function"]["name"] == "f"
    # pyarrow keeps the JSON text, DuckDB reads it as JSON
    row = store.read_table(path).to_pylist()[0]
    assert json.loads(row["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"a": 1}
    got = store.query("select messages[2].tool_calls[1].function.arguments->>'a' as a from sft", sft=path)
    assert got.column("a").to_pylist() == ["1"] * 3


def test_json_arguments_keep_their_own_keys_and_empty_shards_load(tmp_path: Path) -> None:
    """Arguments of different tools never merge (no `"cabin": null` in a `get_user` call), and
    a shard without rows is written without a row group (datasets fails on an empty one)."""
    calls = [("get_user", {"user_id": "u1"}), ("book", {"cabin": "economy", "n": 2})]
    rows = [{"messages": [normalize_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}]})],
        "tools": "[]", "task_id": "t", "trajectory_id": f"tr{i}", "world": "airline", "method": "m", "model": "m",
        "trial": 0, "score": 1.0, "split": "train"} for i, (n, a) in enumerate(calls)]
    with store.DatasetWriter(tmp_path, "sft", "sft", SFT_SCHEMA, 2) as w:
        w.write_rows(rows, prefix="train")
        w.write_rows([], prefix="train")
        path = w.commit(LIN)
    assert [f.path for f in store.read_manifest(path).files] == ["data/train-00000.parquet", "data/train-00001.parquet"]
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=str(path / "data" / "*.parquet"), split="train")
    assert [m[0]["tool_calls"][0]["function"]["arguments"] for m in ds["messages"]] == [a for _, a in calls]


def test_verdict_roundtrip(tmp_path: Path) -> None:
    v = Verdict(trajectory_id="t", task_id="k", verifier="state_equivalence", verifier_version="1",
                passed=True, score=1.0, reasons=[], details={"a": {"b": 1}})
    path = store.write_records(tmp_path, "verdicts", "verdicts", [v], LIN)
    assert store.read_records(path)[0] == v


def test_parts_are_written_in_bounded_row_groups_and_read_back_in_batches(tmp_path: Path) -> None:
    """A shard of any size is written batch by batch into row groups of at most
    `ROW_GROUP_ROWS` rows, and `iter_batches` reads a dataset back a bounded batch at a time,
    in order; a failed part leaves nothing in the dataset."""
    import pyarrow.parquet as pq

    from data.schema import CODECS

    schema, to_row, _ = CODECS["verdicts"]
    rows = [to_row(Verdict(trajectory_id=f"t{i:05d}", task_id=f"k{i % 7}", verifier="v", verifier_version="1",
                           passed=i % 2 == 0, score=1.0)) for i in range(2 * store.ROW_GROUP_ROWS + 500)]
    with store.DatasetWriter(tmp_path, "v", "verdicts", schema, 1) as w:
        with w.part("part") as part:
            part.write_rows(rows[:1200])
            part.write_rows(rows[1200:])
        with pytest.raises(ValueError), w.part("part") as broken:
            broken.write_rows(rows[:3])
            raise ValueError("a batch that fails half-way")
        path = w.commit(LIN)
    manifest = store.read_manifest(path)
    assert [(f.path, f.rows) for f in manifest.files] == [("data/part-00000.parquet", len(rows))]
    assert sorted(p.name for p in (path / "data").iterdir()) == ["part-00000.parquet"]
    meta = pq.ParquetFile(path / "data/part-00000.parquet").metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == len(rows) and max(sizes) <= store.ROW_GROUP_ROWS and len(sizes) >= 3
    batches = list(store.iter_batches(path, batch_rows=600))
    assert max(b.num_rows for b in batches) <= 600
    assert [r["trajectory_id"] for b in batches for r in b.to_pylist()] == [r["trajectory_id"] for r in rows]
