"""SIGTERM on `trajforge train` mid-training: the command ends within seconds with one
`error:` line and exit code 143, as `trajforge run` does (tests/pipelines/test_sigterm.py).
Before, the training commands ran their flow outside the CLI's signal watcher: Prefect's
handler unwound the flow, and the process then hung at interpreter shutdown (real Prefect
server, a real process, TRL SFT on a tiny model)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.interrupt import terminate

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
def test_sigterm_ends_a_training_run_in_seconds(releases: dict[str, Path], tiny_model: Path, tmp_path: Path,
                                                prefect_api: str) -> None:
    out = tmp_path / "out"
    sets = {"sft.model": str(tiny_model), "sft.bf16": "false", "sft.eval_steps": "null", "sft.save_steps": "null"}
    args = [sys.executable, "-m", "pipelines.cli", "train", "sft", "--dataset", str(releases["sft"]), "--out",
            str(out), "--max-steps", "100000", *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]
    proc = subprocess.Popen(args, env={**os.environ, "PREFECT_API_URL": prefect_api}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not any(p.stat().st_size for p in out.glob("train/sft-*/metrics.jsonl")):  # a step has been logged
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "training did not log a step in time"
            time.sleep(0.2)
    finally:
        code, err, took = terminate(proc)
    assert code == 143, err[-3000:]
    assert took < 10, f"SIGTERM took {took:.1f} s to end the training run"
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        "error: interrupted by SIGTERM; nothing was published (rerun the command to start again)"], err[-3000:]
