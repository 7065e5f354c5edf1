"""Scale-out: the same flow on a Dask cluster (a 2-process LocalCluster here; a scheduler
address on a real cluster) synthesizes the same tasks and releases the same rows as on the
default thread pool, however synthesis is packed into task runs; a stalled stage fails
loudly."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module")
def on_threads(tmp_path_factory: pytest.TempPathFactory, flows) -> tuple[dict, Path]:
    """The baseline: TINY on one thread, synthesis as one task run; its summary and out."""
    out = tmp_path_factory.mktemp("threads")
    cfg = load_config(None, {**TINY, "runner.synthesis_shards": 1, "runner.max_workers": 1})
    return flows.execute(flows.run_flow, cfg, str(out)), out


def _rows(path: str) -> list[dict]:
    return sorted(store.read_table(path).to_pylist(), key=lambda r: (r["task_id"], r.get("trajectory_id", "")))


@pytest.mark.slow
def test_dask_runner_releases_the_same_rows_as_threads(tmp_path: Path, flows, on_threads, monkeypatch) -> None:
    from data.parts import PartRef

    # the workers write their parts to a URL (file:// here, s3:// on a cluster without NFS)
    dask = load_config(None, {**TINY, "runner.kind": "dask", "runner.n_workers": 2,
                              "parts_url": f"file://{tmp_path / 'shared-parts'}"})
    a, threads_out = on_threads
    received: list[object] = []  # what the driver gets back from the workers' shards
    gather = flows.gather
    monkeypatch.setattr(flows, "gather", lambda *args: received.extend(got := gather(*args)) or got)
    b = flows.execute(flows.run_flow, dask, str(tmp_path / "dask"))
    assert b["cache"]["rollout"] == {"shards": 2, "cached": 0}, "the dask run must do the work itself"
    # two seed ranges: one task run on one thread, or a task run each on two worker processes
    assert a["cache"]["synthesize"] == {"shards": 1, "ranges": 2, "cached": 0}
    assert b["cache"]["synthesize"] == {"shards": 2, "ranges": 2, "cached": 0}
    tasks_a, tasks_b = (store.latest(Path(out) / "datasets", "tasks") for out in (threads_out, tmp_path / "dask"))
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


@pytest.fixture
def ray() -> Any:
    """The `ray` module, or a skip with the reason (the optional extra is not installed)."""
    reason = "runner.kind=ray needs the ray extra: pip install -c constraints.txt -e '.[ray]'"
    pytest.importorskip("prefect_ray", reason=reason)
    return pytest.importorskip("ray", reason=reason)


@pytest.mark.slow
def test_ray_runner_releases_the_same_rows_as_threads(tmp_path: Path, ray: Any, flows, on_threads,
                                                      monkeypatch) -> None:
    """runner.kind=ray against a local Ray started here (its own temp dir, two CPUs): the same
    tasks and released rows as the thread pool, every part written by a Ray worker to the
    shared `parts_url`."""
    import shutil
    import tempfile

    from data.parts import PartRef

    shared = tmp_path / "shared-parts"
    on_ray = load_config(None, {**TINY, "runner.kind": "ray", "parts_url": f"file://{shared}"})
    a, threads_out = on_threads
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's sockets need a short path
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, _temp_dir=temp,
             namespace="prefect", log_to_driver=False)
    received: list[object] = []  # what the driver gets back from the Ray workers' shards
    gather = flows.gather
    monkeypatch.setattr(flows, "gather", lambda *args: received.extend(got := gather(*args)) or got)
    try:
        b = flows.execute(flows.run_flow, on_ray, str(tmp_path / "ray"))
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    assert b["cache"]["synthesize"]["ranges"] == 2 and b["cache"]["rollout"] == {"shards": 2, "cached": 0}
    for name in ("sft", "rl"):
        assert _rows(a["releases"][name]) == _rows(b["releases"][name])
    tasks_a, tasks_b = (store.latest(Path(out) / "datasets", "tasks") for out in (threads_out, tmp_path / "ray"))
    assert _tasks_files(tasks_a) == _tasks_files(tasks_b)
    # the workers wrote every part to the shared URL; the driver received references only
    refs = [r for got in received for r in (got.values() if isinstance(got, dict) else
                                            got if isinstance(got, list) else [got])]
    assert len(received) == 4 * 2 and all(isinstance(r, PartRef) and r.path.startswith(f"file://{shared}")
                                          for r in refs), refs
    assert {p.relative_to(shared).parts[0] for p in shared.rglob("*.parquet")} >= {"synthesize", "rollout", "verify"}
    assert not (tmp_path / "ray" / "parts").exists()


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


def test_flows_run_without_a_heartbeat_thread_unless_asked(flows, monkeypatch) -> None:
    """Prefect's heartbeat thread costs about a second at the end of every flow run (issue 39):
    flows run without it, unless the environment sets a frequency."""
    from prefect.settings import get_current_settings

    for name in flows.HEARTBEAT_ENV:
        monkeypatch.delenv(name, raising=False)
    with flows.run_settings():
        assert get_current_settings().flows.heartbeat_frequency is None
    outside = get_current_settings().flows.heartbeat_frequency
    monkeypatch.setenv("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "60")
    with flows.run_settings():  # the environment's setting stands
        assert get_current_settings().flows.heartbeat_frequency == outside is not None
