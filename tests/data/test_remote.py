"""Releases mirrored to fsspec URLs (memory:// and file:// here; s3:// etc. the same way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from data import remote, store
from data.records import Task
from data.schema import TASK_SCHEMA


def _release(tmp_path: Path, tasks: list[Task], name: str = "sft") -> Path:
    from data.schema import CODECS

    _, to_row, _ = CODECS["tasks"]
    with store.DatasetWriter(tmp_path / "releases", name, "tasks", TASK_SCHEMA, 1) as w:
        w.write_rows([to_row(t) for t in tasks])
        return w.commit(store.Lineage(config_hash="c"))


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_publish_and_read_back(tmp_path: Path, tasks: list[Task], scheme: str) -> None:
    local = _release(tmp_path, tasks)
    root = f"memory://bucket-{tmp_path.name}/rel" if scheme == "memory" else f"file://{tmp_path}/remote"
    url = remote.publish(local, root)
    assert url.endswith(f"/sft/{local.name}")
    assert remote.read_remote_table(url).to_pylist() == store.read_table(local).to_pylist()
    assert remote.read_pointer(root)["releases"]["sft"] == url
    assert remote.publish(local, root) == url  # idempotent: a committed version is not re-uploaded


def test_incomplete_or_corrupt_remote_release_is_refused(tmp_path: Path, tasks: list[Task]) -> None:
    import fsspec

    local = _release(tmp_path, tasks)
    root = f"memory://corrupt-{tmp_path.name}"
    url = remote.publish(local, root)
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(f"{path}/data/part-00000.parquet", b"garbage")
    with pytest.raises(store.DatasetError, match="checksum mismatch"):
        remote.read_remote_table(url)
    fs.rm_file(f"{path}/_SUCCESS")
    with pytest.raises(store.DatasetError, match="incomplete"):
        remote.read_remote_table(url)


@pytest.mark.slow
def test_run_mirrors_its_release_to_publish_to(tmp_path: Path) -> None:
    from pipelines import flows
    from pipelines.config import load_config

    root = f"file://{tmp_path}/mirror"
    cfg = load_config(None, {"synthesis.n_tasks": 2, "rollout.model.kind": "scripted", "rollout.trials": 1,
                             "publish_to": root})
    summary = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path / "out"))
    pointer = remote.read_pointer(root)
    assert pointer["version"] == Path(summary["releases"]["rl"]).name
    assert set(pointer["releases"]) == {"sft", "sft_recovery", "rl"}
    assert remote.read_remote_table(pointer["releases"]["rl"]).num_rows == store.read_manifest(summary["releases"]["rl"]).rows
