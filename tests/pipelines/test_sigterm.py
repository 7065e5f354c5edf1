"""SIGTERM on `trajforge run` mid-rollout: the run ends within seconds with one `error:`
line and exit code 143, no traceback, and the same command run again resumes from the
shards finished before the signal (real Prefect server, real processes, a fake model
server whose replies stall once the first shard is done, as a slow model would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.lean_server import LeanServer
from tests.interrupt import terminate

pytestmark = pytest.mark.timeout(300)


def _run_args(out: Path, base_url: str) -> list[str]:
    sets = {"synthesis.n_tasks": 4, "synthesis.seed": 5, "shard_size": 1, "rollout.trials": 1,
            "runner.max_workers": 2, "rollout.model.kind": "openai", "rollout.model.name": "fake-model",
            "rollout.model.base_url": base_url, "rollout.model.timeout_s": 120, "rollout.model.max_retries": 0}
    return [sys.executable, "-m", "pipelines.cli", "run", "--out", str(out),
            *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]


def _rollout_parts(out: Path) -> list[Path]:
    return sorted((out / "parts" / "rollout").glob("*/*.parquet"))


@pytest.mark.slow
def test_sigterm_ends_the_run_in_seconds_and_the_rerun_resumes(tmp_path: Path, prefect_api: str) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    with LeanServer(calls=1, delay_s=0.1, stall_s=240) as srv:
        args = _run_args(out, srv.base_url)
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 180
            while not _rollout_parts(out):
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "rollout did not finish a shard in time"
                time.sleep(0.05)
            srv.default_fault = "stall"  # the model now takes minutes per reply: shards in flight hang
            done = len(_rollout_parts(out))
            time.sleep(1.0)  # the next shards' requests are in flight (stalled)
            assert proc.poll() is None, "the run finished before it could be interrupted"
        finally:
            code, err, took = terminate(proc)
        assert code == 143, err[-3000:]
        assert took < 10, f"SIGTERM took {took:.1f} s to end the run"
        assert "Traceback" not in err, err[-3000:]
        lines = [line for line in err.splitlines() if line.strip()]
        assert [line for line in lines if line.startswith("error:")] == [
            "error: interrupted by SIGTERM; rerun the same command to resume (finished shards are kept)"], err
        assert len(lines) == 1, err[-3000:]

        srv.default_fault, srv.stall_s = "ok", 0.0
        rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["cache"]["rollout"]["shards"] == 4
    assert summary["cache"]["rollout"]["cached"] >= done >= 1, summary["cache"]
