"""Shard parts and the run shard by shard (`data.parts`, `pipelines.sharded`,
`pipelines.figures`): parts are atomic, checksummed and copied into datasets, and curating, cleaning and
counting shard by shard gives what the same stages give over the whole run in memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from data import parts, store
from data.records import Task, Trajectory, Verdict
from pipelines import figures, sharded, stages
from pipelines.config import RunConfig, load_config

TINY = {"synthesis.n_tasks": 8, "synthesis.seed": 4, "rollout.model.kind": "scripted",
        "rollout.model.noise": 0.4, "rollout.trials": 3, "shard_size": 3}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, Path, list[list[Task]], list, list]:
    """Tasks in shards, and each shard's rollout and verify parts (no Prefect)."""
    cfg = load_config(None, TINY)
    out = tmp_path_factory.mktemp("sharded")
    tasks = store.read_records(stages.synthesize(cfg, out))
    task_shards = stages.shards(tasks, cfg.shard_size)
    rollouts = [sharded.rollout_part(s, cfg, out) for s in task_shards]
    verifies = [sharded.verify_part(s, r, cfg, out) for s, r in zip(task_shards, rollouts, strict=True)]
    return cfg, out, task_shards, rollouts, verifies


def _records(refs: list, kind: str) -> list:
    return [x for r in refs for x in parts.read_records(r, kind)]


def test_a_part_is_complete_or_absent(tmp_path: Path, run) -> None:
    _, _, _, rollouts, _ = run
    trajectories: list[Trajectory] = parts.read_records(rollouts[0], "trajectories")
    ref = parts.write_records(tmp_path, "rollout", "ab" * 16, "trajectories", trajectories, {"n": len(trajectories)})
    found = parts.find(tmp_path, "rollout", "ab" * 16)
    assert found is not None and found.cached and found.rows == len(trajectories) and found.meta == {"n": len(trajectories)}
    assert [t.id for t in parts.read_records(ref, "trajectories")] == [t.id for t in trajectories]
    assert not list(tmp_path.rglob("*.tmp")), "a finished part leaves no temporary file"
    Path(ref.path).with_suffix(".json").unlink()  # killed between the sidecar and the rename
    assert parts.find(tmp_path, "rollout", "ab" * 16) is None
    assert parts.find(tmp_path, "rollout", "cd" * 16) is None


def test_a_dataset_copies_its_parts_and_shares_no_storage(run) -> None:
    cfg, out, _, rollouts, verifies = run
    path = sharded.write_dataset(rollouts, "trajectories", cfg, out, [])
    manifest = store.read_manifest(path)
    assert manifest.rows == sum(r.rows for r in rollouts) == manifest.stats["trajectories"]
    assert [t.id for t in store.read_records(path)] == [t.id for t in _records(rollouts, "trajectories")]
    assert os.stat(path / manifest.files[0].path).st_ino != os.stat(rollouts[0].path).st_ino  # a copy, not a link
    with store.DatasetWriter(stages.datasets_dir(out), "trajectories", "trajectories",
                             stages.CODECS["trajectories"][0], 3) as w, pytest.raises(store.DatasetError, match="schema"):
        w.adopt(verifies[0].path)


def test_a_part_altered_after_writing_is_a_miss_and_never_read(tmp_path: Path, run) -> None:
    """Issue 34: 64 flipped bytes inside a rollout part changed tool output in published rows.
    Now `find` recomputes the checksum (a miss: the shard is computed again), a reader given
    the ref refuses it, and a dataset never adopts it."""
    trajectories = _records(run[3], "trajectories")
    ref = parts.write_records(tmp_path, "rollout", "ef" * 16, "trajectories", trajectories, {"n": len(trajectories)})
    assert ref.sha256 and parts.find(tmp_path, "rollout", "ef" * 16) is not None
    data = bytearray(Path(ref.path).read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    Path(ref.path).write_bytes(bytes(data))
    assert parts.find(tmp_path, "rollout", "ef" * 16) is None
    with pytest.raises(parts.CorruptPartError, match="altered"):
        parts.read_records(ref, "trajectories")
    with store.DatasetWriter(tmp_path / "ds", "trajectories", "trajectories",
                             stages.CODECS["trajectories"][0], 3) as w, pytest.raises(store.DatasetError, match="altered"):
        w.adopt(ref)


def test_sum_stats_adds_counts_and_keeps_names() -> None:
    a = {"n": 2, "ok": True, "by": {"x": 1}, "name": "topology", "examples": [1, 2], "rate": 0.5}
    b = {"n": 3, "ok": False, "by": {"x": 2, "y": 1}, "name": "other", "examples": [3], "extra": 7}
    assert parts.sum_stats([a, b], max_list=2) == {"n": 5, "ok": True, "by": {"x": 3, "y": 1}, "name": "topology",
                                                   "examples": [1, 2], "rate": 0.5, "extra": 7}


def test_dedup_over_batches_is_dedup_over_all(run) -> None:
    from curation.hygiene import Deduper, dedup

    cfg, out, task_shards, rollouts, _ = run
    trajectories = _records(rollouts, "trajectories")
    rows = [{"messages": t.messages, "trajectory_id": t.id} for t in trajectories]
    rows += [dict(r, trajectory_id=r["trajectory_id"] + "-again") for r in rows[:5]]
    whole, report = dedup(rows)
    d = Deduper()
    batched = [r for i in range(0, len(rows), 7) for r in d.filter(rows[i:i + 7])]
    assert [r["trajectory_id"] for r in batched] == [r["trajectory_id"] for r in whole]
    assert d.report == report and report.exact_duplicates >= 5


@pytest.mark.parametrize("curation,options", [("outcome", {}), ("topology", {}), ("topology", {"rl_budget": 2})])
def test_curating_shard_by_shard_releases_what_curating_all_does(tmp_path: Path, run, curation: str,
                                                                 options: dict) -> None:
    base, _, task_shards, rollouts, verifies = run
    cfg = base.model_copy(update={"curation": curation, "curation_options": options})
    tasks = [t for s in task_shards for t in s]
    trajectories: list[Trajectory] = _records(rollouts, "trajectories")
    verdicts: list[Verdict] = _records(verifies, "verdicts")
    # the whole run in memory
    selection = stages.curate(cfg, tasks, trajectories, verdicts)
    whole = stages.write_curated(cfg, tmp_path / "whole", selection, tasks, [])
    # shard by shard
    out = tmp_path / "sharded"
    curated = [sharded.curate_part(s, r, v, cfg, out) for s, r, v in zip(task_shards, rollouts, verifies, strict=True)]
    fig = sharded.merged_figures(cfg, curated)
    shard = sharded.write_curated(cfg, out, curated, fig, [])
    for name in ("sft", "rl"):
        key = "trajectory_id" if name == "sft" else "task_id"
        a = {r[key]: r for r in store.read_table(whole[name]).to_pylist()}
        b = {r[key]: r for r in store.read_table(shard[name]).to_pylist()}
        assert a == b, name
        sa, sb = store.read_manifest(whole[name]).stats, store.read_manifest(shard[name]).stats
        for k in ("drops", "splits", "data_quality", "policy_pass_rate", "sft_selected", "rl_selected"):
            assert sa.get(k) == sb.get(k), (name, k)
        assert sa["hygiene"]["dedup"]["kept"] == sb["hygiene"]["dedup"]["kept"]
    if options.get("rl_budget"):
        assert len(b) == 2 and all(r["selection_reason"].startswith("sampled_by_ebr_sh") for r in b.values())
    assert not list((out / "parts").glob("curate-*/*/*.parquet")), "the curate parts are removed once written"
    # the figures, counted shard by shard, are those of the whole run
    assert fig["tasks"] == figures.shard_figures(cfg, tasks, trajectories, verdicts, selection)["tasks"]
    assert figures.summary(len(tasks), figures.headline(cfg, fig, {}), {}) == stages.summary(
        tasks, trajectories, verdicts, {}, selection, cfg=cfg)


def test_parts_at_a_url_make_the_same_datasets(tmp_path: Path, run) -> None:
    """`parts_url`: shards write their parts to storage every worker reaches (memory:// here,
    s3:// on a cluster); the driver downloads them into the datasets."""
    base, _, task_shards, rollouts, _ = run
    cfg = base.model_copy(update={"parts_url": f"memory://trajforge-test/{tmp_path.name}"})
    assert cfg.content_hash() == base.content_hash(), "where parts are kept is not content"
    remote = [sharded.rollout_part(s, cfg, tmp_path) for s in task_shards]
    assert all(r.path.startswith("memory://") for r in remote) and not (tmp_path / "parts").exists()
    again = sharded.rollout_part(task_shards[0], cfg, tmp_path)
    assert again.cached and again.path == remote[0].path
    verifies = [sharded.verify_part(s, r, cfg, tmp_path) for s, r in zip(task_shards, remote, strict=True)]
    path = sharded.write_dataset(remote, "trajectories", cfg, tmp_path, [])
    assert [t.id for t in store.read_records(path)] == [t.id for t in _records(rollouts, "trajectories")]
    curated = [sharded.curate_part(s, r, v, cfg, tmp_path) for s, r, v in zip(task_shards, remote, verifies, strict=True)]
    fig = sharded.merged_figures(cfg, curated)
    written = sharded.write_curated(cfg, tmp_path, curated, fig, [])
    assert store.read_manifest(written["sft"]).rows > 0
    assert parts.find(cfg.parts_url, "curate-sft", Path(curated[0]["sft"].path).stem) is None  # removed once written
