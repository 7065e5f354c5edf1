"""Caching and resume of whole runs: identical reruns make no model calls and publish nothing
new, a changed input recomputes exactly the shards it affects, and a run killed with SIGKILL
at any point resumes to the same released content as an uninterrupted run (real Prefect,
real processes). One shard through the cache: `stages/test_rollout.py`; publishing the same
content twice: `stages/test_publish.py`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from data import store
from data.records import canonical_json, content_hash
from pipelines import stages
from pipelines.config import RunConfig, load_config

TINY = {"synthesis.n_tasks": 6, "synthesis.seed": 3, "synthesis_shard_tasks": 2, "rollout.model.kind": "scripted",
        "rollout.model.noise": 0.4, "rollout.trials": 2, "shard_size": 2}  # three seed ranges


@pytest.fixture(scope="module")
def flows():
    from pipelines import flows

    return flows


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
    """The server holds the whole run: each synthesis, rollout, verify and curate shard,
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
    ranges = -(-TINY["synthesis.n_tasks"] // TINY["synthesis_shard_tasks"])
    assert names == {"synthesize-shard": ranges, "synthesize": 1, "rollout-shard": shards, "write-trajectories": 1, "verify-shard": shards,
                     "write-verdicts": 1, "curate-shard": shards, "curate": 1, "hygiene-and-curated-datasets": 1, "report": 1,
                     "figures": 1, "release": 1}, names
    assert all(tr.state is not None and tr.state.is_completed() for tr in task_runs)


@pytest.mark.slow
@pytest.mark.parametrize("point", [
    "synthesize.range_done:2",       # between seed ranges of synthesis
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
    if point.startswith("synthesize"):  # the ranges done before the kill are not synthesized again
        assert summary["cache"]["synthesize"]["cached"] >= 2, summary["cache"]
    if point.startswith("release") or point.startswith("store.write"):
        assert summary["cache"]["model_calls"] == 0, "work finished before the kill was redone"
    if point.startswith("release"):  # once finished, the same run again publishes nothing new
        again = _run_cli(tmp_path, {}, prefect_api)
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout.strip().splitlines()[-1])["release"] == "unchanged"
        assert "unchanged" in again.stdout
        for name in ("sft", "rl"):
            assert store.versions(tmp_path / "releases", name) == [pointer["version"]]
