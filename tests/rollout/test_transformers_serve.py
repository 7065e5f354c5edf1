"""A real OpenAI-compatible server: `transformers serve` on loopback with the embedded model
(a copy of its folder with our tool-calling chat template and a `response_template`),
and rollouts of airline tasks through the OpenAI client path (`rollout.collector`, kind
"openai"). Slow: it loads the model and generates on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from data.records import Sampling, Task
from rollout.agent import AgentConfig
from rollout.collector import ModelConfig, RolloutConfig, collect
from rollout.model import MODEL_ERROR_REASONS
from rollout.prepare import decode_threads

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def _model_copy(dst: Path) -> Path:
    """The embedded model folder with the tool-calling template and response_template;
    the weights are linked, not copied."""
    from rollout.embedded import RESPONSE_TEMPLATE, chat_template, prepare_embedded_model

    src = prepare_embedded_model()
    dst.mkdir(parents=True)
    for name in (
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        shutil.copy(src / name, dst / name)
    (dst / "model.safetensors").symlink_to(src / "model.safetensors")
    (dst / "chat_template.jinja").write_text(chat_template(), encoding="utf-8")
    config = json.loads((dst / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    config["response_template"] = RESPONSE_TEMPLATE
    assert RESPONSE_TEMPLATE["start_anchor"]
    (dst / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return dst


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    exe = Path(sys.executable).parent / "transformers"
    if not exe.exists():
        pytest.skip("the transformers CLI is not installed")
    folder = _model_copy(tmp_path_factory.mktemp("serve") / "SmolLM2-135M-Instruct")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(folder.parent / "serve.log", "wb")  # noqa: SIM115
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        # the embedded engine's rule (cores less the machine's load): beside a busy test worker
        # the server's default two OpenMP threads made this test 123 s against 28 s with one
        "OMP_NUM_THREADS": str(decode_threads()),
    }
    proc = subprocess.Popen(
        [
            str(exe),
            "serve",
            str(folder),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--device",
            "cpu",
            "--dtype",
            "bfloat16",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    "transformers serve did not start:\n"
                    + (folder.parent / "serve.log").read_text()[-3000:]
                )
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", str(folder)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_rollouts_through_transformers_serve(served: tuple[str, str], tasks: list[Task]) -> None:
    base_url, model_name = served
    cfg = RolloutConfig(
        model=ModelConfig(
            kind="openai", name=model_name, base_urls=[base_url], timeout_s=600, max_retries=1
        ),
        trials=1,
        concurrency=2,
        sampling=Sampling(temperature=0.0, max_tokens=48, seed=0),
        agent=AgentConfig(max_turns=2),
    )
    trajs = collect(tasks[:2], cfg)
    assert len(trajs) == 2
    for t in trajs:
        assert t.termination != "model_error", t.metadata
        assert t.metadata.get("model_error_reason") in (None, *MODEL_ERROR_REASONS)
        assert t.usage.model_calls >= 1 and t.usage.prompt_tokens > 500  # policy + tool schemas
        assistant = [m for m in t.messages if m["role"] == "assistant"]
        assert assistant and all(isinstance(m.get("content"), str) for m in assistant)
        assert t.model == f"openai:{model_name}"
