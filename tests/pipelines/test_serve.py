"""Schedules fire for real: `trajforge serve` against a Prefect server on loopback serves an
interval deployment of the end-to-end flow, and each run (forced: its inputs do not change)
publishes a new release version whose pointer names the previous one as parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from data import store
from pipelines.serve import DeploymentSpec, load_serve_config


def test_schedules_file_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of cron or interval_s"):
        DeploymentSpec(name="x", cron="0 3 * * *", interval_s=60)
    cfg = load_serve_config(Path("configs/schedules.yaml"))
    assert {d.flow for d in cfg.deployments} == {"run", "verify"}


def test_deployments_are_built_with_their_schedules(tmp_path: Path) -> None:
    from pipelines.serve import ServeConfig, build_deployments

    cfg = ServeConfig(deployments=[
        DeploymentSpec(name="nightly", flow="run", config=str(Path("configs/tiny-scripted.yaml").resolve()), out=str(tmp_path),
                       cron="0 3 * * *"),
        DeploymentSpec(name="often", flow="verify", overrides={"shard_size": 3}, out="rel", interval_s=90),
    ])
    nightly, often = build_deployments(cfg, base=tmp_path)
    assert nightly.name == "nightly" and nightly.schedules[0].schedule.cron == "0 3 * * *"
    assert nightly.parameters["config"]["name"] == "tiny-scripted"
    assert often.schedules[0].schedule.interval.total_seconds() == 90
    assert often.parameters["config"]["shard_size"] == 3 and often.parameters["out"] == str(tmp_path / "rel")


@pytest.mark.slow
def test_interval_schedule_publishes_two_releases(tmp_path: Path, prefect_api: str) -> None:
    out = tmp_path / "scheduled"
    schedules = tmp_path / "schedules.yaml"
    schedules.write_text(yaml.safe_dump({"server": prefect_api, "deployments": [{
        "name": "every-few-seconds", "flow": "run", "out": str(out), "interval_s": 4,
        "set": {"synthesis.n_tasks": 3, "rollout.model.kind": "scripted", "rollout.trials": 2,
                "release.force_new_version": True},  # unforced, unchanged inputs publish one version
    }]}))
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_RUNNER_POLL_FREQUENCY": "2"}
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "serve", str(schedules)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(store.versions(out / "releases", "rl")) < 2:
            assert proc.poll() is None, proc.stdout.read()[-3000:] if proc.stdout else ""
            time.sleep(1)
        versions = store.versions(out / "releases", "rl")
        assert len(versions) >= 2, "the schedule did not publish two releases in time"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    # the pointer moved to a complete set whose parent is an earlier release
    versions = store.versions(out / "releases", "rl")
    pointer = store.read_pointer(out / "releases")
    assert pointer["version"] in versions and pointer["parent"] in versions
    assert pointer["parent"] < pointer["version"]
    second = store.read_manifest(out / "releases" / "rl" / pointer["version"])
    assert str(out / "releases" / "rl" / pointer["parent"]) in second.lineage.parents


def _serve(schedules: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", "serve", str(schedules)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM to serve (and its flow runs); its output."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    return output


def _deployment_runs(api: str, name: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        return client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[name])),
                                     limit=200)


def _pending_run(api: str, deployment_id: Any) -> Any:
    """A run of the deployment left Pending (submitted, never started); its id."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Pending

    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        return client.create_flow_run_from_deployment(deployment_id, state=Pending()).id


@pytest.mark.slow
def test_missed_runs_collapse_into_one_catch_up_run(tmp_path: Path, prefect_api: str) -> None:
    """Serve, stop, let runs come due while nothing serves, serve again: at most one of the
    missed runs runs (late_runs: collapse, the default; the others end Cancelled as
    skipped), and no run is left Pending after either stop. Then `skip` cancels them all."""
    from prefect.client.schemas.objects import StateType

    from pipelines.serve import settle_late_runs

    name = f"catch-up-{tmp_path.name}"[-60:]
    schedules = tmp_path / "schedules.yaml"
    schedules.write_text(yaml.safe_dump({"server": prefect_api, "deployments": [{
        "name": name, "flow": "synth", "out": str(tmp_path / "out"), "interval_s": 2,
        "set": {"synthesis.n_tasks": 1}}]}))
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}

    def submitted(runs: list) -> set:
        """Runs serve started (not those it cancelled: skipped late runs, runs left pending)."""
        return {r.id for r in runs if r.state_type not in (StateType.SCHEDULED, StateType.CANCELLED)}

    first = _serve(schedules, env)
    try:
        deadline = time.monotonic() + 120
        while not submitted(_deployment_runs(prefect_api, name)):
            assert first.poll() is None, first.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "serve submitted no run in time"
            time.sleep(0.5)
    finally:
        output = _stop(first)
    assert first.returncode == 0, output[-3000:]
    runs = _deployment_runs(prefect_api, name)
    assert not [r for r in runs if r.state_type == StateType.PENDING], output
    before = submitted(runs)
    stuck = _pending_run(prefect_api, runs[0].deployment_id)  # as a serve killed mid-submission leaves one

    time.sleep(13)  # runs come due every 2 s while nothing serves (beyond the runner's 10 s prefetch)
    restart = time.time()
    missed = {r.id for r in _deployment_runs(prefect_api, name)
              if r.state_type == StateType.SCHEDULED and r.expected_start_time.timestamp() < restart}
    assert len(missed) >= 3

    second = _serve(schedules, env)
    try:
        deadline = time.monotonic() + 120
        while not submitted(_deployment_runs(prefect_api, name)) - before - {stuck}:
            assert second.poll() is None, second.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "serve ran nothing after the restart"
            time.sleep(0.5)
        time.sleep(4)  # a few polls of the runner: more catch-up runs would be submitted by now
    finally:
        output = _stop(second)
    assert second.returncode == 0, output[-3000:]
    assert "1 kept" in output, output[-3000:]  # the newest run missed when serve started is the catch-up
    runs = _deployment_runs(prefect_api, name)
    assert len(submitted(runs) & missed) <= 1, [(r.expected_start_time, r.state_name) for r in runs if r.id in missed]
    assert not [r for r in runs if r.state_type == StateType.PENDING], output
    assert next(r for r in runs if r.id == stuck).state_type == StateType.CANCELLED

    time.sleep(3)  # more runs come due; `skip` cancels every missed run
    settled = settle_late_runs(prefect_api, [runs[0].deployment_id], "skip")
    assert settled["cancelled"] >= 1 and settled["kept"] == 0
    assert not [r for r in _deployment_runs(prefect_api, name)
                if r.state_type == StateType.SCHEDULED and r.expected_start_time.timestamp() < time.time() - 1]


def test_the_servers_log_goes_to_a_file_never_an_unread_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server whose stderr was a pipe nobody read blocked for good once 64 KB of errors
    (runs marked late after the serve tests) filled it: every later flow hung."""
    from pipelines import serve as serve_module

    seen: dict = {}

    class Exited:
        returncode = 3

        def __init__(self, cmd: list[str], **kw: object) -> None:
            seen.update(kw)
            out = kw["stdout"]
            out.write(b"boom: the server could not start\n")  # type: ignore[attr-defined]
            self.pid = 0

        def poll(self) -> int:
            return 3

    monkeypatch.setattr(serve_module.subprocess, "Popen", Exited)
    server = serve_module.PrefectServer(home=tmp_path / "home", startup_timeout_s=5)
    with pytest.raises(RuntimeError, match="exited with code 3: boom: the server could not start"):
        server.start()
    assert seen["stdout"] is not subprocess.PIPE and seen["stderr"] is subprocess.STDOUT
    assert server.log_path is not None and server.log_path.parent == tmp_path / "home"
