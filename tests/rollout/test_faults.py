"""Fault injection: full rollouts (agent loop + OpenAI client) against a fake server that
answers with 429 bursts, 503s, connection resets, truncated bodies, garbage, 30 s stalls,
or is killed and restarted mid-run. Every trajectory ends with a result or a recorded
failure reason, nothing hangs past its timeout, and no trajectory is lost."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest

from data.records import Task, Trajectory
from rollout.collector import ModelConfig, RolloutConfig, collect
from rollout.model import MODEL_ERROR_REASONS
from tests.fakes.lean_server import LeanServer
from tests.paths import TESTS

pytestmark = pytest.mark.timeout(60)

LEAN = TESTS / "fakes" / "lean_server.py"
FAST: dict[str, Any] = {
    "timeout_s": 0.5,
    "max_retries": 4,
    "backoff_base_s": 0.02,
    "backoff_max_s": 0.2,
    "breaker_failures": 50,
    "breaker_cooldown_s": 0.3,
}


def _collect(
    url: str, tasks: list[Task], trials: int = 2, concurrency: int = 8, **kw: Any
) -> list[Trajectory]:
    model = ModelConfig(kind="openai", name="m", base_urls=[url], **(FAST | kw))
    return collect(tasks, RolloutConfig(model=model, trials=trials, concurrency=concurrency))


def _all_accounted(trajs: list[Trajectory], tasks: list[Task], trials: int) -> None:
    assert len(trajs) == len(tasks) * trials
    assert len({t.id for t in trajs}) == len(trajs)
    for t in trajs:
        assert t.termination
        if t.termination == "model_error":
            assert t.metadata["model_error_reason"] in MODEL_ERROR_REASONS, t.metadata


@pytest.mark.parametrize("fault", ["503", "500", "reset", "close", "truncate", "garbage"])
def test_transient_faults_are_retried(fault: str, tasks: list[Task]) -> None:
    with LeanServer(
        calls=1, tool="calculate", tool_args={"expression": "1 + 2"}, faults=[fault] * 6
    ) as srv:
        trajs = _collect(srv.base_url, tasks[:4])
    _all_accounted(trajs, tasks[:4], 2)
    assert srv.faults_served[fault] == 6
    assert all(t.termination != "model_error" for t in trajs), [t.metadata for t in trajs]
    # every episode completed: the tool call, then the reply offering more help, which the
    # scripted user declines
    assert all(t.usage.model_calls == 2 for t in trajs)


def test_429_burst(tasks: list[Task]) -> None:
    with LeanServer(
        calls=1, tool="calculate", tool_args={"expression": "1"}, faults=["429"] * 24, retry_ms=30
    ) as srv:
        t0 = time.monotonic()
        trajs = _collect(srv.base_url, tasks[:4], max_retries=10)
        elapsed = time.monotonic() - t0
    _all_accounted(trajs, tasks[:4], 2)
    assert srv.faults_served["429"] == 24
    assert all(t.termination != "model_error" for t in trajs)
    assert elapsed >= 0.03  # Retry-After was waited for


def test_stalls_time_out_and_are_retried(tasks: list[Task]) -> None:
    with LeanServer(
        calls=1, tool="calculate", tool_args={"expression": "1"}, faults=["stall"] * 4, stall_s=30
    ) as srv:
        t0 = time.monotonic()
        trajs = _collect(srv.base_url, tasks[:4])
        elapsed = time.monotonic() - t0
    _all_accounted(trajs, tasks[:4], 2)
    assert all(t.termination != "model_error" for t in trajs)
    assert elapsed < 10, "a 30 s stall must cost one 0.5 s timeout, not 30 s"


def test_persistent_failure_is_recorded_not_hung(tasks: list[Task]) -> None:
    with LeanServer(default_fault="503") as srv:
        t0 = time.monotonic()
        trajs = _collect(srv.base_url, tasks[:3], max_retries=2, breaker_failures=3)
        elapsed = time.monotonic() - t0
    _all_accounted(trajs, tasks[:3], 2)
    assert all(t.termination == "model_error" for t in trajs)
    assert {t.metadata["model_error_reason"] for t in trajs} <= {"server_error", "circuit_open"}
    assert elapsed < 15


def test_stall_everywhere_ends_every_episode_within_its_timeouts(tasks: list[Task]) -> None:
    with LeanServer(default_fault="stall", stall_s=30) as srv:
        t0 = time.monotonic()
        trajs = _collect(srv.base_url, tasks[:2], timeout_s=0.3, max_retries=1)
        elapsed = time.monotonic() - t0
    _all_accounted(trajs, tasks[:2], 2)
    assert {t.metadata["model_error_reason"] for t in trajs} == {"timeout"}
    assert elapsed < 5


def _spawn(port: int, delay_ms: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(LEAN),
            "serve",
            "m",
            "--port",
            str(port),
            "--delay-ms",
            str(delay_ms),
            "--calls",
            "2",
            "--tool",
            "calculate",
            "--tool-args",
            '{"expression": "1"}',
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("lean server did not start")


def test_server_killed_and_restarted_mid_run(tasks: list[Task]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _spawn(port, delay_ms=150)
    result: dict[str, Any] = {}

    def run() -> None:
        result["trajs"] = _collect(
            f"http://127.0.0.1:{port}/v1",
            tasks,
            trials=4,
            concurrency=8,
            timeout_s=1.0,
            max_retries=8,
            backoff_base_s=0.05,
            backoff_max_s=0.4,
            breaker_failures=4,
            breaker_cooldown_s=0.3,
        )

    worker = threading.Thread(target=run)
    t0 = time.monotonic()
    worker.start()
    time.sleep(0.8)
    proc.kill()  # SIGKILL mid-run: in-flight requests die with the connection
    proc.wait()
    time.sleep(0.6)
    proc = _spawn(port, delay_ms=150)
    try:
        worker.join(45)
        assert not worker.is_alive(), "the collection hung"
    finally:
        proc.kill()
        proc.wait()
    elapsed = time.monotonic() - t0
    trajs: list[Trajectory] = result["trajs"]
    _all_accounted(trajs, tasks, 4)
    assert elapsed > 1.4  # the run spanned the outage (28 episodes x 3 turns x 150 ms / 8)
    done = [t for t in trajs if t.termination != "model_error"]
    assert len(done) >= len(trajs) // 2, [
        t.metadata for t in trajs if t.termination == "model_error"
    ]
    assert all(t.usage.model_calls == 3 for t in done)  # two tool calls, then the closing offer
    assert elapsed < 45
