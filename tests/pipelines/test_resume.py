"""Caching and resume: identical reruns make no model calls and publish nothing new, a
changed input recomputes exactly the shards it affects, and a run killed with SIGKILL at
any point resumes to the same released content as an uninterrupted run (real Prefect, real
processes)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from curation.base import Selection
from data import store
from data.cache import ShardCache
from data.records import Task, canonical_json, content_hash
from data.schema import RELEASE_SCHEMA_VERSION, SFT_SCHEMA
from pipelines import stages
from pipelines.config import RunConfig, load_config
from tests.pipeline_run import curated_run

TINY = {"synthesis.n_tasks": 6, "synthesis.seed": 3, "rollout.model.kind": "scripted",
        "rollout.model.noise": 0.4, "rollout.trials": 2, "shard_size": 2}


@pytest.fixture(scope="module")
def flows():
    from pipelines import flows

    return flows


@pytest.fixture
def count_calls(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts every call the scripted policy (the model here) answers."""
    from rollout.policies import ScriptedPolicy

    calls: Counter = Counter()
    original = ScriptedPolicy.chat

    async def chat(self, messages, tools, sampling):  # type: ignore[no-untyped-def]
        calls[self.name] += 1
        return await original(self, messages, tools, sampling)

    monkeypatch.setattr(ScriptedPolicy, "chat", chat)
    return calls


def release_content(out: Path) -> dict[str, list[str]]:
    """Content hashes of every row of the release set LATEST.json points at."""
    pointer = store.read_pointer(out / "releases")
    assert pointer is not None, "no release was published"
    return {name: sorted(content_hash(canonical_json(r), 32) for r in store.read_table(path).to_pylist())
            for name, path in sorted(pointer["releases"].items())}


def test_identical_rerun_makes_no_model_calls(tmp_path: Path, flows, count_calls: Counter) -> None:
    cfg = load_config(None, TINY).model_dump(mode="json")
    first = flows.run_flow(cfg, str(tmp_path))
    assert count_calls["scripted:noise=0.4"] > 0 and first["cache"]["rollout"]["cached"] == 0
    made = sum(count_calls.values())
    second = flows.run_flow(cfg, str(tmp_path))
    assert sum(count_calls.values()) == made, "an identical rerun called the model"
    assert second["cache"]["rollout"] == {"shards": 3, "cached": 3}
    assert second["cache"]["verify"]["cached"] == second["cache"]["verify"]["shards"]
    assert second["cache"]["model_calls"] == 0
    # same content as the release LATEST.json names: nothing new is published
    assert first["release"] == "published" and second["release"] == "unchanged"
    assert second["releases"] == first["releases"] and second["release_version"] == first["release_version"]
    for name in ("sft", "rl"):
        assert store.versions(tmp_path / "releases", name) == [first["release_version"]]
    assert store.read_pointer(tmp_path / "releases")["version"] == first["release_version"]
    # issue 34: an unchanged rerun adds no version of any intermediate dataset
    for name in stages.INTERMEDIATE:
        assert len(store.versions(tmp_path / "datasets", name)) == 1, name


def test_changed_inputs_recompute_exactly_the_affected_shards(tmp_path: Path, flows, count_calls: Counter,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(None, TINY)
    flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    # a new verifier version re-verifies every shard and rolls nothing out again
    from verifiers.state import StateVerifier

    monkeypatch.setattr(StateVerifier, "version", "9.9.9-test")
    made = sum(count_calls.values())
    s = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    assert sum(count_calls.values()) == made
    assert s["cache"]["rollout"]["cached"] == 3 and s["cache"]["verify"]["cached"] == 0
    # new sampling settings roll every shard out again
    hot = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(
        update={"sampling": cfg.rollout.sampling.model_copy(update={"temperature": 1.0})})})
    s = flows.run_flow(hot.model_dump(mode="json"), str(tmp_path))
    assert s["cache"]["rollout"]["cached"] == 0 and sum(count_calls.values()) > made


def test_changing_one_task_recomputes_only_its_shard(tmp_path: Path, tasks, count_calls: Counter) -> None:
    cfg = load_config(None, {**TINY, "reference_trials": 0})
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


def test_a_torn_cache_entry_is_a_miss_not_an_error(tmp_path: Path, tasks) -> None:
    cfg = load_config(None, {**TINY, "reference_trials": 0})
    cache = ShardCache(tmp_path / "cache")
    first, cached = stages.rollout_shard_cached(tasks[:2], cfg, cache)
    assert not cached
    (entry,) = (tmp_path / "cache" / "rollout").rglob("*.jsonl.gz")
    entry.write_bytes(entry.read_bytes()[:40])
    again, cached = stages.rollout_shard_cached(tasks[:2], cfg, cache)
    assert not cached and cache.stats.corrupt == 1
    assert [t.id for t in again] == [t.id for t in first]


# -- SIGKILL at several points, then resume --------------------------------------------------

def _run_cli(out: Path, env_extra: dict[str, str], api_url: str) -> subprocess.CompletedProcess[str]:
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    env = {**os.environ, "PREFECT_API_URL": api_url, **env_extra}
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--out", str(out), *sets],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def uninterrupted_out(tmp_path_factory: pytest.TempPathFactory, prefect_api: str) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    proc = _run_cli(out, {}, prefect_api)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def uninterrupted(uninterrupted_out: Path) -> dict[str, list[str]]:
    return release_content(uninterrupted_out)


@pytest.mark.slow
def test_every_stage_is_a_task_run_of_the_flow_run(uninterrupted_out: Path, prefect_api: str) -> None:
    """The server holds the whole run: synthesis, each rollout, verify and curate shard,
    writing the records, merging the curation, the report, the figures and the release, each a completed
    task run of the one `trajforge-run` flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: prefect_api}), get_client(sync_client=True) as client:
        (run,) = [r for r in client.read_flow_runs(limit=200) if r.parameters.get("out") == str(uninterrupted_out)]
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])),
                                          limit=200)
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])), limit=200)
    assert run.state is not None and run.state.is_completed()
    assert run.name == RunConfig().name, "the flow run is named after the config"
    # issue 34: the shards' INFO lines reach the server, and task runs are named stage-shard
    messages = [entry.message for entry in logs]
    assert any(m.startswith("rollout shard=0 ") for m in messages), messages[:10]
    assert {tr.name for tr in task_runs} >= {"rollout-shard-0", "verify-shard-1", "write-trajectories", "release"}
    names = Counter(re.sub(r"-\d+$", "", tr.name) for tr in task_runs)
    shards = -(-TINY["synthesis.n_tasks"] // TINY["shard_size"])
    assert names == {"synthesize": 1, "rollout-shard": shards, "write-trajectories": 1, "verify-shard": shards,
                     "write-verdicts": 1, "curate-shard": shards, "curate": 1, "hygiene-and-curated-datasets": 1, "report": 1,
                     "figures": 1, "release": 1}, names
    assert all(tr.state is not None and tr.state.is_completed() for tr in task_runs)


@pytest.mark.slow
@pytest.mark.parametrize("point", [
    "rollout.shard_done:2",          # between shards of a stage
    "store.commit.before_rename:2",  # mid-write: the trajectories dataset staged, not renamed
    "store.write.after_file:2",      # mid-write of the curated datasets (the tasks' file, then curated sft)
    "release.dataset_done:1",        # mid-publish: sft released, rl not yet, no pointer
])
def test_killed_run_resumes_to_the_same_release(tmp_path: Path, point: str, prefect_api: str,
                                                uninterrupted: dict[str, list[str]]) -> None:
    killed = _run_cli(tmp_path, {"TRAJFORGE_CRASH_AT": point}, prefect_api)
    assert killed.returncode == -signal.SIGKILL, f"crash point {point} was not reached: {killed.stderr[-2000:]}"
    resumed = _run_cli(tmp_path, {}, prefect_api)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert release_content(tmp_path) == uninterrupted
    pointer = store.read_pointer(tmp_path / "releases")
    # no duplicated and no missing trajectories behind the release
    traj_path = store.latest(tmp_path / "datasets", "trajectories")
    ids = [t.id for t in store.read_records(traj_path)]
    assert len(ids) == len(set(ids)) == 6 * (2 + 1)
    # a publish interrupted half-way was finished under its own version, not duplicated
    for name in ("sft", "rl"):
        assert store.versions(tmp_path / "releases", name) == [pointer["version"]]
    assert not list((tmp_path / "datasets").glob("*/.staging-*")), "stale staging folders were left"
    assert not (tmp_path / "releases" / ".pending.json").exists()
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    if point.startswith("release") or point.startswith("store.write"):
        assert summary["cache"]["model_calls"] == 0, "work finished before the kill was redone"
    if point.startswith("release"):  # once finished, the same run again publishes nothing new
        again = _run_cli(tmp_path, {}, prefect_api)
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout.strip().splitlines()[-1])["release"] == "unchanged"
        assert "unchanged" in again.stdout
        for name in ("sft", "rl"):
            assert store.versions(tmp_path / "releases", name) == [pointer["version"]]


# -- publishing the same content twice ------------------------------------------------------

@pytest.fixture(scope="module")
def curated(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, Path, Selection, list[Task], dict[str, Path]]:
    """A tiny scripted run up to its curated datasets (plain stages, no Prefect): the config,
    its out folder, the selection and tasks (to curate again) and the curated paths."""
    cfg = load_config(None, TINY)
    out = tmp_path_factory.mktemp("curated")
    tasks, selection, paths = curated_run(cfg, out, shard_size=2)
    return cfg, out, selection, tasks, paths


def _versions(out: Path) -> dict[str, list[str]]:
    return {name: store.versions(out / "releases", name) for name in stages.RELEASES}


def test_same_content_publishes_nothing_new(tmp_path: Path, curated) -> None:
    cfg, src, selection, tasks, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths, run_id="first")
    assert not first.unchanged
    pointer = (tmp_path / "releases" / store.POINTER).read_text()
    # curated again from the same selection: the same bytes, so the same curated versions
    again = stages.write_curated(cfg, src, selection, tasks, [])
    assert again == paths
    second = stages.publish_release(cfg, tmp_path, again, run_id="second")
    assert second.unchanged and second.paths == first.paths and second.fingerprint == first.fingerprint
    assert _versions(tmp_path) == {"sft": [first.version], "rl": [first.version]}
    assert (tmp_path / "releases" / store.POINTER).read_text() == pointer  # not even rewritten
    assert not (tmp_path / "releases" / ".pending.json").exists()
    summary = stages.summary(tasks, [], [], second.paths, selection, second)
    assert summary["release"] == "unchanged" and summary["release_version"] == first.version


def test_a_changed_row_or_setting_publishes_a_new_version(tmp_path: Path, curated) -> None:
    cfg, src, _, _, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths)
    # one row's selection reason edited
    table = store.read_table(paths["sft"])
    reasons = table.column("selection_reason").to_pylist()
    reasons[-1] = (reasons[-1] or "") + " (edited)"
    edited = table.set_column(table.schema.get_field_index("selection_reason"), "selection_reason",
                              pa.array(reasons, pa.string()))
    with store.DatasetWriter(tmp_path / "edited", "curated_sft", "sft", SFT_SCHEMA, RELEASE_SCHEMA_VERSION) as w:
        w.write_table(edited)
        edited_sft = w.commit(store.Lineage())
    by_row = stages.publish_release(cfg, tmp_path, {**paths, "sft": edited_sft})
    assert not by_row.unchanged and by_row.fingerprint != first.fingerprint
    # one setting changed, the rows as first published
    licensed = cfg.model_copy(update={"card": cfg.card.model_copy(update={"license": "apache-2.0"})})
    by_config = stages.publish_release(licensed, tmp_path, paths)
    assert not by_config.unchanged and by_config.fingerprint not in (first.fingerprint, by_row.fingerprint)
    versions = [first.version, by_row.version, by_config.version]
    assert _versions(tmp_path) == {"sft": versions, "rl": versions}
    pointer = store.read_pointer(tmp_path / "releases")
    assert pointer["version"] == by_config.version and pointer["parent"] == by_row.version
    released = store.read_table(by_row.paths["sft"]).column("selection_reason").to_pylist()
    assert sorted(map(str, released)) == sorted(map(str, reasons))  # rows in split order


@pytest.mark.parametrize("damage", ["delete", "tamper"])
def test_unchanged_verifies_the_release_it_keeps(tmp_path: Path, curated, damage: str) -> None:
    """Issue 34: a data file of the release LATEST.json names deleted or altered; the next
    publish of the same content republishes instead of reporting it `unchanged`."""
    cfg, _, _, _, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths)
    data = next((first.paths["sft"] / "data").glob("*.parquet"))
    if damage == "delete":
        data.unlink()
    else:
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    second = stages.publish_release(cfg, tmp_path, paths)
    assert not second.unchanged and second.version != first.version
    for path in second.paths.values():
        store.read_manifest(path, verify=True)
    assert store.read_pointer(tmp_path / "releases")["version"] == second.version


def test_retention_keeps_the_newest_and_what_the_release_descends_from(tmp_path: Path, curated) -> None:
    cfg, _, _, _, paths = curated
    root = tmp_path / "datasets"
    made = []
    for i in range(4):
        with store.DatasetWriter(root, "trajectories", "trajectories", stages.CODECS["trajectories"][0], 3,
                                 version=f"2026010{i}T000000000Z") as w:
            made.append(w.commit(store.Lineage()))
    # the release names the oldest trajectories version in its lineage (through a curated one)
    with store.DatasetWriter(root, "curated_sft", "sft", SFT_SCHEMA, RELEASE_SCHEMA_VERSION) as w:
        curated_path = w.commit(store.Lineage(parents=[str(made[0])]))
    stages.publish_release(cfg, tmp_path, {"sft": curated_path, "rl": paths["rl"]})
    removed = stages.apply_retention(cfg.model_copy(update={"retention": cfg.retention.model_copy(
        update={"keep_versions": 2})}), tmp_path)
    assert removed == {"trajectories": 1}
    assert store.versions(root, "trajectories") == [made[0].name, made[2].name, made[3].name]
    assert stages.apply_retention(cfg.model_copy(update={"retention": cfg.retention.model_copy(
        update={"keep_versions": None})}), tmp_path) == {}


def test_force_new_version_publishes_the_same_content_again(tmp_path: Path, curated) -> None:
    cfg, _, _, _, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths)
    forced_cfg = load_config(None, {**TINY, "release.force_new_version": True})
    forced = stages.publish_release(forced_cfg, tmp_path, paths)
    assert not forced.unchanged and forced.version != first.version
    assert forced.fingerprint == first.fingerprint  # the switch is not content
    assert store.read_table(forced.paths["rl"]).to_pylist() == store.read_table(first.paths["rl"]).to_pylist()
    assert store.read_pointer(tmp_path / "releases")["parent"] == first.version
    assert str(first.paths["sft"]) in store.read_manifest(forced.paths["sft"]).lineage.parents
    # switched off again: the forced version is the one LATEST.json names, and unchanged
    after = stages.publish_release(cfg, tmp_path, paths)
    assert after.unchanged and after.version == forced.version
    assert _versions(tmp_path) == {"sft": [first.version, forced.version], "rl": [first.version, forced.version]}


def test_an_incomplete_latest_release_is_published_again(tmp_path: Path, curated) -> None:
    cfg, _, _, _, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths)
    (first.paths["rl"] / store.SUCCESS).unlink()
    again = stages.publish_release(cfg, tmp_path, paths)
    assert not again.unchanged and again.version != first.version
    assert store.read_pointer(tmp_path / "releases")["version"] == again.version


def test_a_publish_cut_half_way_is_finished_under_its_version(tmp_path: Path, curated,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _, _, _, paths = curated

    class Killed(Exception):
        pass

    def cut_after_first_dataset(name: str) -> None:
        if name == "release.dataset_done":
            raise Killed(name)

    with monkeypatch.context() as m:
        m.setattr(stages, "crashpoint", cut_after_first_dataset)
        with pytest.raises(Killed):
            stages.publish_release(cfg, tmp_path, paths)
    intent = json.loads((tmp_path / "releases" / ".pending.json").read_text())
    assert store.read_pointer(tmp_path / "releases") is None
    sft = tmp_path / "releases" / "sft" / intent["version"]
    committed = (sft / store.MANIFEST).stat().st_mtime_ns
    resumed = stages.publish_release(cfg, tmp_path, paths)
    assert not resumed.unchanged and resumed.version == intent["version"]
    assert (sft / store.MANIFEST).stat().st_mtime_ns == committed  # kept, not written twice
    assert not (tmp_path / "releases" / ".pending.json").exists()
    assert stages.publish_release(cfg, tmp_path, paths).unchanged
    # a forced publish of the same content cut half-way is finished by the next run, forced or not
    with monkeypatch.context() as m:
        m.setattr(stages, "crashpoint", cut_after_first_dataset)
        with pytest.raises(Killed):
            stages.publish_release(load_config(None, {**TINY, "release.force_new_version": True}), tmp_path, paths)
    finished = stages.publish_release(cfg, tmp_path, paths)
    assert not finished.unchanged and finished.version != resumed.version
    assert _versions(tmp_path) == {"sft": [resumed.version, finished.version], "rl": [resumed.version, finished.version]}
    assert not (tmp_path / "releases" / ".pending.json").exists()


def test_an_unchanged_release_mirrors_only_what_publish_to_lacks(tmp_path: Path, curated) -> None:
    from data import remote

    cfg, _, _, _, paths = curated
    mirror = tmp_path / "mirror"
    cfg = cfg.model_copy(update={"publish_to": f"file://{mirror}"})
    first = stages.publish_release(cfg, tmp_path / "out", paths)
    sft_file = mirror / "sft" / first.version / store.MANIFEST
    uploaded = sft_file.stat().st_mtime_ns
    shutil.rmtree(mirror / "rl" / first.version)  # a mirror an earlier run did not finish
    again = stages.publish_release(cfg, tmp_path / "out", paths)
    assert again.unchanged
    assert sft_file.stat().st_mtime_ns == uploaded  # not uploaded again
    url = remote.read_pointer(f"file://{mirror}")["releases"]["rl"]
    assert remote.read_remote_table(url).to_pylist() == store.read_table(first.paths["rl"]).to_pylist()
