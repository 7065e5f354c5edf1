"""`rollout.vllm_server`: the `vllm serve` command line, and the launcher's lifecycle with a
stand-in executable (the lean fake server, which accepts vLLM's flags)."""

from __future__ import annotations

import json
import socket
import stat
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from data.records import Sampling
from rollout.openai_client import OpenAICompatibleModel
from rollout.vllm_server import (
    VLLMServer,
    VLLMServerConfig,
    VLLMServerError,
    build_command,
    launch_replicas,
)
from tests.paths import TESTS

pytestmark = pytest.mark.timeout(60)

LEAN = TESTS / "fakes" / "lean_server.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stand_in(tmp_path: Path, prelude: str = "") -> str:
    """An executable named `vllm` that runs the lean fake server with the same argv."""
    exe = tmp_path / "vllm"
    exe.write_text(f'#!/bin/sh\n{prelude}\nexec "{sys.executable}" "{LEAN}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _cfg(tmp_path: Path, prelude: str = "", **kw: object) -> VLLMServerConfig:
    return VLLMServerConfig(
        model="org/Model-7B",
        port=_free_port(),
        executable=_stand_in(tmp_path, prelude),
        served_model_name="policy",
        **kw,
    )  # type: ignore[arg-type]


def test_command_line() -> None:
    cfg = VLLMServerConfig(
        model="Qwen/Qwen2.5-7B-Instruct",
        port=8123,
        dtype="bfloat16",
        max_model_len=16384,
        gpu_memory_utilization=0.85,
        data_parallel_size=4,
        tool_call_parser="hermes",
        extra_args=["--max-num-seqs", "256"],
    )
    cmd = build_command(cfg)
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    pairs = {cmd[i]: cmd[i + 1] for i in range(3, len(cmd) - 1) if cmd[i].startswith("--")}
    assert pairs["--port"] == "8123" and pairs["--host"] == "127.0.0.1"
    assert pairs["--dtype"] == "bfloat16" and pairs["--max-model-len"] == "16384"
    assert pairs["--gpu-memory-utilization"] == "0.85" and pairs["--data-parallel-size"] == "4"
    assert pairs["--tool-call-parser"] == "hermes" and "--enable-auto-tool-choice" in cmd
    assert "--enable-prefix-caching" in cmd and cmd[-2:] == ["--max-num-seqs", "256"]
    plain = build_command(
        VLLMServerConfig(model="m", enable_auto_tool_choice=False, enable_prefix_caching=False)
    )
    assert "--enable-auto-tool-choice" not in plain and "--tool-call-parser" not in plain
    assert "--data-parallel-size" not in plain and "--no-enable-prefix-caching" in plain


@pytest.mark.parametrize("bad", [{"tool_call_parser": "nope"}, {"dtype": "int3"}])
def test_bad_settings_are_refused(bad: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        build_command(VLLMServerConfig(model="m", **bad))  # type: ignore[arg-type]


async def test_lifecycle_start_serve_stop(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, max_model_len=4096)
    server = VLLMServer(cfg, startup_timeout_s=20, poll_s=0.1)
    server.start()
    try:
        assert server.alive()
        with urllib.request.urlopen(f"{server.root_url}/debug/argv") as r:
            assert json.loads(r.read()) == server.command[1:]  # the stand-in got our argv
        model = OpenAICompatibleModel(base_url=server.base_url, model="policy", timeout_s=5)
        try:
            resp = await model.chat([{"role": "user", "content": "hi"}], [], Sampling())
        finally:
            await model.aclose()
        assert resp.tool_calls and resp.tool_calls[0].name == "lookup"
    finally:
        code = server.stop()
    assert code == -15 and not server.alive()  # SIGTERM was enough
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{server.root_url}/health", timeout=1)


def test_slow_start_is_waited_for(tmp_path: Path) -> None:
    server = VLLMServer(
        _cfg(tmp_path), startup_timeout_s=20, poll_s=0.1, env={"LEAN_STARTUP_S": "1.0"}
    )
    t0 = time.monotonic()
    with server:
        assert time.monotonic() - t0 >= 1.0
    assert not server.alive()


def test_never_healthy_fails_within_the_timeout(tmp_path: Path) -> None:
    server = VLLMServer(
        _cfg(tmp_path), startup_timeout_s=2, poll_s=0.1, env={"LEAN_NEVER_HEALTHY": "1"}
    )
    t0 = time.monotonic()
    with pytest.raises(VLLMServerError, match=r"not ready within 2s \(/health answered 503\)"):
        server.start()
    assert time.monotonic() - t0 < 6
    assert not server.alive()  # the launcher cleaned up


def test_server_that_dies_is_reported(tmp_path: Path) -> None:
    server = VLLMServer(
        _cfg(tmp_path),
        startup_timeout_s=30,
        poll_s=0.1,
        env={"LEAN_DIE_AFTER_S": "0.3", "LEAN_STARTUP_S": "30"},
    )
    t0 = time.monotonic()
    with pytest.raises(VLLMServerError, match="exited with code 3"):
        server.start()
    assert time.monotonic() - t0 < 10


def test_death_after_start_is_detected(tmp_path: Path) -> None:
    server = VLLMServer(
        _cfg(tmp_path), startup_timeout_s=20, poll_s=0.1, env={"LEAN_DIE_AFTER_S": "1.5"}
    )
    with server:
        server.check_alive()
        time.sleep(2.0)
        with pytest.raises(VLLMServerError, match="exited with code 3"):
            server.check_alive()


def test_wrong_model_is_not_ready(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path).model_copy(
        update={"served_model_name": None, "extra_args": ["--served-model-name", "x"]}
    )
    server = VLLMServer(cfg, startup_timeout_s=1.5, poll_s=0.1)
    with pytest.raises(VLLMServerError, match="/v1/models answered 200"):
        server.start()


def test_sigterm_ignored_means_sigkill(tmp_path: Path) -> None:
    server = VLLMServer(
        _cfg(tmp_path, prelude="trap '' TERM"), startup_timeout_s=20, poll_s=0.1, stop_grace_s=0.5
    )
    server.start()
    t0 = time.monotonic()
    assert server.stop() == -9
    assert 0.4 < time.monotonic() - t0 < 5


def test_missing_executable(tmp_path: Path) -> None:
    cfg = VLLMServerConfig(model="m", executable=str(tmp_path / "no-such-vllm"), port=_free_port())
    with pytest.raises(VLLMServerError, match="could not run"):
        VLLMServer(cfg).start()


def test_replicas_on_consecutive_ports(tmp_path: Path) -> None:
    port = _free_port()
    cfg = _cfg(tmp_path).model_copy(update={"port": port})
    try:
        with launch_replicas(cfg, 2, startup_timeout_s=20, poll_s=0.1) as servers:
            assert [s.cfg.port for s in servers] == [port, port + 1]
            assert [s.env["CUDA_VISIBLE_DEVICES"] for s in servers] == ["0", "1"]  # type: ignore[index]
            assert all(s.alive() for s in servers)
    except VLLMServerError as e:  # port + 1 taken by someone else: not our failure
        if "exited" not in str(e):
            raise
