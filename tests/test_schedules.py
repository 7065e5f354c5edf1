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
