"""Scale-out: the same flow on a Dask cluster (a 2-process LocalCluster here; a scheduler
address on a real cluster) synthesizes the same tasks and releases the same rows as on the
default thread pool, however synthesis is packed into task runs; a stalled stage fails
loudly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from data import store
from pipelines.config import RunnerConfig, load_config

TINY = {"synthesis.n_tasks": 4, "synthesis.seed": 5, "synthesis_shard_tasks": 2, "rollout.model.kind": "scripted",
        "rollout.model.noise": 0.3, "rollout.trials": 2, "shard_size": 2}


def _tasks_files(summary_or_path: str) -> list[str]:
    """The sha256 of each file of a `tasks` dataset: equal files, byte-identical tasks."""
    return [f.sha256 for f in store.read_manifest(summary_or_path).files]


@pytest.fixture(scope="module")
def flows():
    from pipelines import flows

    return flows


def _rows(path: str) -> list[dict]:
    return sorted(store.read_table(path).to_pylist(), key=lambda r: (r["task_id"], r.get("trajectory_id", "")))


@pytest.mark.slow
def test_dask_runner_releases_the_same_rows_as_threads(tmp_path: Path, flows, monkeypatch) -> None:
    from data.parts import PartRef

    threads = load_config(None, {**TINY, "runner.synthesis_shards": 1, "runner.max_workers": 1})
    # the workers write their parts to a URL (file:// here, s3:// on a cluster without NFS)
    dask = load_config(None, {**TINY, "runner.kind": "dask", "runner.n_workers": 2,
                              "parts_url": f"file://{tmp_path / 'shared-parts'}"})
    a = flows.execute(flows.run_flow, threads, str(tmp_path / "threads"))
    received: list[object] = []  # what the driver gets back from the workers' shards
    gather = flows.gather
    monkeypatch.setattr(flows, "gather", lambda *args: received.extend(got := gather(*args)) or got)
    b = flows.execute(flows.run_flow, dask, str(tmp_path / "dask"))
    assert b["cache"]["rollout"] == {"shards": 2, "cached": 0}, "the dask run must do the work itself"
    # two seed ranges: one task run on one thread, or a task run each on two worker processes
    assert a["cache"]["synthesize"] == {"shards": 1, "ranges": 2, "cached": 0}
    assert b["cache"]["synthesize"] == {"shards": 2, "ranges": 2, "cached": 0}
    tasks_a, tasks_b = (store.latest(Path(out) / "datasets", "tasks") for out in (tmp_path / "threads", tmp_path / "dask"))
    assert _tasks_files(tasks_a) == _tasks_files(tasks_b)
    assert store.read_manifest(tasks_a).stats == store.read_manifest(tasks_b).stats
    for name in ("sft", "rl"):
        assert _rows(a["releases"][name]) == _rows(b["releases"][name])
    # the workers wrote the parts; the driver received references (paths and figures), no records
    assert len(received) == 4 * 2  # synthesis, rollout, verify and curate: two shards each
    refs = [r for got in received for r in (got.values() if isinstance(got, dict) else
                                            got if isinstance(got, list) else [got])]
    assert all(isinstance(r, PartRef) and r.path.startswith(f"file://{tmp_path / 'shared-parts'}") for r in refs), refs
    assert store.read_manifest(b["releases"]["sft"]).rows == store.read_manifest(a["releases"]["sft"]).rows


def test_runner_kinds_build(flows) -> None:
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    assert isinstance(flows.build_runner(RunnerConfig()), ThreadPoolTaskRunner)
    runner = flows.build_runner(RunnerConfig(kind="dask", address="tcp://10.0.0.5:8786"))
    assert isinstance(runner, DaskTaskRunner) and runner.address == "tcp://10.0.0.5:8786"
    try:
        import prefect_ray  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match=r"trajforge\[ray\]"):
            flows.build_runner(RunnerConfig(kind="ray"))


def test_a_stalled_stage_fails_loudly(flows) -> None:
    from prefect import flow, task

    @task
    def hang(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @flow
    def stalls() -> list[float]:
        return flows.gather([hang.submit(0.1), hang.submit(5.0)], "rollout", stall_timeout_s=1.0)

    with pytest.raises(flows.StallError, match="no shard finished in 1 s"):
        stalls()
