"""A run with `vllm:` set starts the servers for the rollout stage, rolls out through them and
stops them (a stand-in executable plays `vllm serve` here; no GPU or vLLM on these machines)."""

from __future__ import annotations

import random
import socket
import stat
import sys
from pathlib import Path

import pytest

from data import store
from pipelines.config import load_config
from tests.paths import TESTS

LEAN = TESTS / "fakes" / "lean_server.py"


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _two_free_ports() -> int:
    """A port P with P and P + 1 free, below the kernel's ephemeral range: a port from that range
    (what binding port 0 gives) can be taken by any client socket, the flow's own included,
    before the second replica binds it."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.is_file() else 32768
    low = low if low > 12_000 else 32768  # a range reaching down this far: take our chances above it
    pick = random.Random()
    for _ in range(1000):
        port = pick.randrange(10_000, low - 1)
        if _bindable(port) and _bindable(port + 1):
            return port
    raise RuntimeError(f"no two consecutive free ports in 10000-{low}")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(300)
def test_run_launches_vllm_replicas_for_rollouts(tmp_path: Path) -> None:
    exe = tmp_path / "vllm"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{LEAN}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    port = _two_free_ports()
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
