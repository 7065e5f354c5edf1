"""A run with `vllm:` set starts the servers for the rollout stage, rolls out through them and
stops them (a stand-in executable plays `vllm serve` here; no GPU or vLLM on these machines)."""

from __future__ import annotations

import socket
import stat
import sys
from pathlib import Path

import pytest

from data import store
from pipelines.config import load_config
from tests.paths import TESTS

LEAN = TESTS / "fakes" / "lean_server.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(300)
def test_run_launches_vllm_replicas_for_rollouts(tmp_path: Path) -> None:
    exe = tmp_path / "vllm"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{LEAN}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    port = _free_port()
    while _listening(port + 1):  # two consecutive free ports
        port = _free_port()
    cfg = load_config(None, {"synthesis.n_tasks": 2, "rollout.trials": 2, "reference_trials": 0,
                             "vllm": {"server": {"model": "org/Policy-7B", "served_model_name": "policy",
                                                 "port": port, "executable": str(exe)},
                                      "replicas": 2, "startup_timeout_s": 60}})
    from pipelines import flows

    summary = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path / "out"))
    trajectories = store.read_records(store.latest(tmp_path / "out" / "datasets", "trajectories"))
    assert len(trajectories) == summary["policy_trajectories"] == 4
    assert {t.model for t in trajectories} == {"openai:policy"}
    assert all(t.usage.model_calls > 0 and t.termination != "model_error" for t in trajectories)
    assert not _listening(port) and not _listening(port + 1), "the vLLM servers were not stopped"
