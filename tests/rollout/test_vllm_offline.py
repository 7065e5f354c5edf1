"""`rollout.vllm_offline.VLLMOfflineModel` with a stand-in engine shaped like `vllm.LLM`
(vLLM itself needs CUDA): batching, per-request settings, token records, tool calls."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from data.records import Sampling
from rollout.model import ChatModel, ModelError
from rollout.vllm_offline import VLLMOfflineModel

pytestmark = pytest.mark.timeout(30)


@dataclass
class _Logprob:
    logprob: float
    rank: int = 1


@dataclass
class _Completion:
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, _Logprob]] | None
    finish_reason: str


@dataclass
class _Output:
    prompt_token_ids: list[int]
    outputs: list[_Completion]
    prompt_logprobs: list[dict[int, _Logprob] | None] | None = None
    request_id: str = "r"


@dataclass
class StandInLLM:
    """`chat(conversations, params, **kw)` as in vllm.LLM; echoes, with a tool call when asked."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    fail: bool = False

    def chat(
        self, conversations: list[list[dict[str, Any]]], params: list[dict[str, Any]], **kw: Any
    ) -> list[_Output]:
        self.calls.append({"n": len(conversations), "params": params, **kw})
        if self.fail:
            raise RuntimeError("CUDA out of memory")
        outs = []
        for conv, p in zip(conversations, params, strict=True):
            last = conv[-1]["content"]
            text = (
                '<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>'
                if "order" in last
                else f"echo {last}"
            )
            cut = len(text) > p["max_tokens"]
            text = text[: p["max_tokens"]]
            ids = [ord(c) for c in text]
            prompt = [1, 2, 3]
            outs.append(
                _Output(
                    prompt_token_ids=prompt,
                    outputs=[
                        _Completion(
                            text,
                            ids,
                            [{t: _Logprob(-0.5)} for t in ids],
                            "length" if cut else "stop",
                        )
                    ],
                    prompt_logprobs=[
                        None,
                        {2: _Logprob(-1.0), 9: _Logprob(-0.1)},
                        {3: _Logprob(-2.0)},
                    ],
                )
            )
        return outs


async def test_concurrent_chats_share_one_engine_call() -> None:
    llm = StandInLLM()
    model = VLLMOfflineModel("m", llm=llm, max_batch=16, prompt_logprobs=1)
    assert isinstance(model, ChatModel)
    replies = await asyncio.gather(
        *[
            model.chat(
                [{"role": "user", "content": f"hello {i}"}], [], Sampling(seed=i, max_tokens=64)
            )
            for i in range(10)
        ]
    )
    assert [len(c["params"]) for c in llm.calls] == [10] and model.batch_sizes == [10]
    assert [r.text for r in replies] == [f"echo hello {i}" for i in range(10)]
    assert [p["seed"] for p in llm.calls[0]["params"]] == list(range(10))
    r = replies[0]
    assert r.completion_token_ids == [ord(c) for c in "echo hello 0"]
    assert r.completion_logprobs == [-0.5] * len(r.completion_token_ids)
    assert r.prompt_token_ids == [1, 2, 3] and r.prompt_logprobs == [None, -1.0, -2.0]


async def test_batches_are_capped_and_tools_are_passed() -> None:
    llm = StandInLLM()
    model = VLLMOfflineModel("m", llm=llm, max_batch=4)
    tools = [{"type": "function", "function": {"name": "get_order"}}]
    replies = await asyncio.gather(
        *[
            model.chat([{"role": "user", "content": "my order"}], tools, Sampling())
            for _ in range(10)
        ]
    )
    assert sorted(c["n"] for c in llm.calls) == [2, 4, 4]
    assert all(c["tools"] == tools for c in llm.calls)
    assert all(
        r.tool_calls[0].name == "get_order" and r.finish_reason == "tool_calls" for r in replies
    )


async def test_truncation_and_engine_failure() -> None:
    model = VLLMOfflineModel("m", llm=StandInLLM())
    r = await model.chat([{"role": "user", "content": "my order"}], [], Sampling(max_tokens=20))
    assert r.finish_reason == "length" and [m.error for m in r.malformed] == ["truncated"]
    broken = VLLMOfflineModel("m", llm=StandInLLM(fail=True))
    with pytest.raises(ModelError, match="CUDA out of memory") as info:
        await broken.chat([{"role": "user", "content": "x"}], [], Sampling())
    assert info.value.reason == "backend"


async def test_without_vllm_installed_the_error_is_clear() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        model = VLLMOfflineModel("m")
        with pytest.raises(ModelError, match="vLLM is not installed"):
            await model.chat([{"role": "user", "content": "x"}], [], Sampling())
    else:  # pragma: no cover - a machine with vLLM
        pytest.skip("vLLM is installed here")


ENGINES: list[StandInLLM] = []


def make_engine(model: str, **engine_kw: Any) -> StandInLLM:
    """An `engine_factory` for the `vllm_offline` backend: a stand-in engine per call."""
    ENGINES.append(StandInLLM())
    return ENGINES[-1]


def test_selectable_from_a_config_and_collects(tasks: list) -> None:
    """`rollout.model.kind: vllm_offline` builds the backend (engine loaded once per process,
    a batching front per collection) and a collection runs through it."""
    from rollout.backends import close_shared_models
    from rollout.collector import ModelConfig, RolloutConfig, collect

    cfg = RolloutConfig(model=ModelConfig(kind="vllm_offline", name="policy", options={
        "engine_factory": "tests.rollout.test_vllm_offline:make_engine", "max_batch": 4}), trials=2)
    try:
        first = collect(tasks[:2], cfg)
        again = collect(tasks[:1], cfg)
    finally:
        close_shared_models()
    import importlib

    engines = importlib.import_module("tests.rollout.test_vllm_offline").ENGINES  # the module the factory named
    assert len(engines) == 1 and engines[0].calls  # one engine served both collections
    assert all(t.model == "vllm:policy" and t.termination != "model_error" for t in first + again)
    assert all(t.turn_tokens for t in first)  # token ids and logprobs from the engine
    with pytest.raises(ValueError, match="model backend 'vllm_offline'"):
        ModelConfig(kind="vllm_offline", options={"engine_kwargs": {}})
