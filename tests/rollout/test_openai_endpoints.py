"""`OpenAICompatibleModel` at scale: several endpoints, sticky conversations, in-flight
limits, retry policy, circuit breakers, failure reasons and token-exact records."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from data import store
from data.records import Sampling
from envs.world import World
from rollout.agent import run_episode
from rollout.collector import ModelConfig, RolloutConfig, collect
from rollout.model import ModelError
from rollout.openai_client import (
    CircuitBreaker,
    OpenAICompatibleModel,
    _conversation_key,
)
from rollout.user import ScriptedUser
from tests.fakes.lean_server import LeanServer
from tests.fakes.openai_server import FakeOpenAIServer, error_reply, text_reply

pytestmark = pytest.mark.timeout(60)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def _opening(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": f"case {i}"},
    ]


async def _converse(model: OpenAICompatibleModel, i: int, turns: int = 3) -> list[str]:
    """A conversation of `turns` model calls; returns the text of each reply."""
    messages = _opening(i)
    out = []
    for _ in range(turns):
        resp = await model.chat(messages, TOOLS, Sampling(seed=i))
        out.append(resp.text)
        messages.append({"role": "assistant", "content": resp.text or "ok"})
        messages.append({"role": "user", "content": "go on"})
    return out


def _homed_on(model: OpenAICompatibleModel, url: str, cases: range) -> list[int]:
    """The cases (of `_converse`) whose conversation has `url` as its rendezvous home."""
    homed = [
        i
        for i in cases
        if model._order(_conversation_key(_opening(i), Sampling(seed=i)))[0].url == url.rstrip("/")
    ]
    assert homed, f"no case in {cases} is homed on {url}"
    return homed


@pytest.fixture
def two_servers() -> Iterator[tuple[LeanServer, LeanServer]]:
    with LeanServer(record=True, calls=0) as a, LeanServer(record=True, calls=0) as b:
        yield a, b


def _conversations(server: LeanServer) -> list[str]:
    return [body["messages"][1]["content"] for body in server.bodies]


async def test_conversations_stick_to_one_endpoint(
    two_servers: tuple[LeanServer, LeanServer],
) -> None:
    a, b = two_servers
    model = OpenAICompatibleModel(base_urls=[a.base_url, b.base_url], model="m", timeout_s=5)
    try:
        await asyncio.gather(*[_converse(model, i) for i in range(24)])
    finally:
        await model.aclose()
    on_a, on_b = set(_conversations(a)), set(_conversations(b))
    assert on_a and on_b, "rendezvous hashing should spread conversations over both"
    assert not on_a & on_b, f"conversations split across endpoints: {on_a & on_b}"
    assert len(on_a | on_b) == 24 and a.chat_requests + b.chat_requests == 72


async def test_explicit_conversation_key_pins_the_endpoint(
    two_servers: tuple[LeanServer, LeanServer],
) -> None:
    a, b = two_servers
    model = OpenAICompatibleModel(base_urls=[a.base_url, b.base_url], model="m", timeout_s=5)
    try:
        for i in range(10):
            await model.chat(_opening(i), [], Sampling(seed=i), conversation_key="same")
    finally:
        await model.aclose()
    assert sorted([a.chat_requests, b.chat_requests]) == [0, 10]


async def test_in_flight_requests_are_bounded_per_endpoint() -> None:
    with LeanServer(delay_s=0.2, calls=0) as server:
        model = OpenAICompatibleModel(base_url=server.base_url, model="m", max_in_flight=3)
        try:
            t0 = time.monotonic()
            await asyncio.gather(*[model.chat(_opening(i), [], Sampling()) for i in range(9)])
            elapsed = time.monotonic() - t0
        finally:
            await model.aclose()
    assert server.max_active == 3
    assert elapsed >= 0.55  # three waves of 0.2 s


async def test_failing_endpoint_opens_its_breaker_and_conversations_fail_over() -> None:
    with (
        LeanServer(calls=0, default_fault="503", record=True) as bad,
        LeanServer(calls=0, record=True) as good,
    ):
        model = OpenAICompatibleModel(
            base_urls=[bad.base_url, good.base_url],
            model="m",
            timeout_s=5,
            max_retries=2,
            breaker_failures=3,
            breaker_cooldown_s=0.3,
            backoff_base_s=0.01,
        )
        try:
            replies = await asyncio.gather(*[_converse(model, i) for i in range(16)])
            assert all(len(r) == 3 and r[-1] == "Goodbye." for r in replies)  # all finished
            stats = model.stats()
            assert stats[bad.base_url.rstrip("/")]["breaker"] == "open"
            assert stats[bad.base_url.rstrip("/")]["breaker_opened"] >= 1
            seen_bad = bad.chat_requests
            assert seen_bad >= 3
            # While open, nothing goes to the bad endpoint ...
            await asyncio.gather(*[_converse(model, i, turns=1) for i in range(8)])
            assert bad.chat_requests == seen_bad
            # ... after the cool-down exactly one probe does (and fails: still open).
            await asyncio.sleep(0.35)
            # (Only conversations whose home is the bad endpoint try it, so pick those:
            # which ones they are depends on the ports and the hash seed.)
            homed = _homed_on(model, bad.base_url, range(100, 400))
            await asyncio.gather(*[_converse(model, i, turns=1) for i in homed[:8]])
            assert bad.chat_requests == seen_bad + 1
            # The endpoint recovers: the next probe closes the breaker.
            bad.default_fault = "ok"
            await asyncio.sleep(0.35)
            homed = _homed_on(model, bad.base_url, range(400, 700))
            await asyncio.gather(*[_converse(model, i, turns=1) for i in homed[:8]])
            assert model.stats()[bad.base_url.rstrip("/")]["breaker"] == "closed"
        finally:
            await model.aclose()


async def test_every_endpoint_open_fails_with_circuit_open() -> None:
    with LeanServer(calls=0, default_fault="503") as bad:
        model = OpenAICompatibleModel(
            base_url=bad.base_url,
            model="m",
            max_retries=1,
            breaker_failures=2,
            breaker_cooldown_s=0.2,
            backoff_base_s=0.01,
        )
        try:
            results = await asyncio.gather(
                *[model.chat(_opening(i), [], Sampling()) for i in range(6)], return_exceptions=True
            )
        finally:
            await model.aclose()
    assert all(isinstance(r, ModelError) for r in results)
    assert {r.reason for r in results} <= {"server_error", "circuit_open"}  # type: ignore[union-attr]
    assert bad.chat_requests < 12  # the breaker held requests back


def test_breaker_state_machine() -> None:
    now = [0.0]
    b = CircuitBreaker(failures=2, cooldown_s=5, clock=lambda: now[0])
    assert b.try_acquire() and b.state == "closed"
    b.record_failure()
    assert b.state == "closed"
    b.record_success()
    b.record_failure()
    assert b.state == "closed"  # a success in between resets the count
    b.record_failure()
    assert b.state == "open" and not b.try_acquire() and b.ready_in() == 5
    now[0] = 5.0
    assert b.try_acquire() and b.state == "half_open"
    assert not b.try_acquire()  # one probe at a time
    b.record_failure()
    assert b.state == "open" and b.times_opened == 2
    now[0] = 10.0
    assert b.try_acquire()
    b.release()  # the probe was cancelled: another may go
    assert b.try_acquire()
    b.record_success()
    assert b.state == "closed" and b.try_acquire()


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    model = OpenAICompatibleModel(
        base_url="http://127.0.0.1:9/v1", model="m", backoff_base_s=1.0, backoff_max_s=5.0
    )
    for attempt, cap in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)]:
        delays = [model._delay(attempt, None) for _ in range(200)]
        assert cap / 2 <= min(delays) and max(delays) <= cap
        assert max(delays) - min(delays) > cap / 4  # jittered


async def test_retry_after_is_honoured() -> None:
    with FakeOpenAIServer([error_reply(429, retry_after_s=0.4), text_reply("ok")]) as srv:
        model = OpenAICompatibleModel(base_url=srv.base_url, model="m", backoff_base_s=0.0)
        try:
            t0 = time.monotonic()
            resp = await model.chat(_opening(0), [], Sampling())
            assert resp.text == "ok" and time.monotonic() - t0 >= 0.4
        finally:
            await model.aclose()


async def test_retry_after_longer_than_we_wait_fails_at_once() -> None:
    with FakeOpenAIServer([error_reply(429, retry_after_s=120.0)]) as srv:
        model = OpenAICompatibleModel(base_url=srv.base_url, model="m", max_retry_after_s=30)
        try:
            with pytest.raises(ModelError) as info:
                await model.chat(_opening(0), [], Sampling())
        finally:
            await model.aclose()
    assert info.value.reason == "rate_limited" and info.value.attempts == 1
    assert len(srv.chat_requests) == 1


@pytest.mark.parametrize(
    ("replies", "reason", "attempts"),
    [
        ([error_reply(400)], "client_error", 1),
        # the request no longer fits the context (vLLM's words, then OpenAI's): not retried
        ([error_reply(400, body={"error": {
            "message": "'max_tokens' or 'max_completion_tokens' is too large: 256. This model's maximum context "
                       "length is 8192 tokens and your request has 8100 input tokens (256 > 8192 - 8100).",
            "type": "BadRequestError", "param": None, "code": 400}})], "context_length", 1),
        ([error_reply(400, body={"error": {"message": "This model's maximum context length is 128000 tokens.",
                                           "type": "invalid_request_error", "code": "context_length_exceeded"}})],
         "context_length", 1),
        ([error_reply(503)] * 3, "server_error", 3),
        ([error_reply(429)] * 3, "rate_limited", 3),
    ],
)
async def test_final_failures_carry_their_reason(
    replies: list[Any], reason: str, attempts: int
) -> None:
    with FakeOpenAIServer(replies) as srv:
        model = OpenAICompatibleModel(base_url=srv.base_url, model="m", max_retries=2)
        try:
            with pytest.raises(ModelError) as info:
                await model.chat(_opening(0), [], Sampling())
        finally:
            await model.aclose()
    assert (info.value.reason, info.value.attempts) == (reason, attempts)
    assert info.value.endpoint == srv.base_url


async def test_timeout_reason_and_bound() -> None:
    with LeanServer(calls=0, default_fault="stall", stall_s=5) as server:
        model = OpenAICompatibleModel(
            base_url=server.base_url, model="m", timeout_s=0.3, max_retries=1, backoff_base_s=0.01
        )
        try:
            t0 = time.monotonic()
            with pytest.raises(ModelError, match="timed out") as info:
                await model.chat(_opening(0), [], Sampling())
            assert time.monotonic() - t0 < 1.5
        finally:
            await model.aclose()
    assert info.value.reason == "timeout" and info.value.attempts == 2


async def test_agent_records_the_failure_reason(airline: World, tasks: list[Any]) -> None:
    with FakeOpenAIServer([error_reply(500)] * 3) as srv:
        model = OpenAICompatibleModel(base_url=srv.base_url, model="m", max_retries=2)
        try:
            traj = await run_episode(
                tasks[0], airline, model, ScriptedUser(tasks[0]), Sampling(), 0
            )
        finally:
            await model.aclose()
    assert traj.termination == "model_error"
    assert traj.metadata["model_error_reason"] == "server_error"
    assert traj.metadata["model_error_attempts"] == 3
    assert traj.error_counts == {"model_error": 1}


async def test_agent_survives_a_backend_that_raises(airline: World, tasks: list[Any]) -> None:
    class Broken:
        name = "broken"

        async def chat(self, *a: Any, **k: Any) -> Any:
            raise KeyError("bug")

        async def aclose(self) -> None:
            return None

    traj = await run_episode(tasks[0], airline, Broken(), ScriptedUser(tasks[0]), Sampling(), 0)  # type: ignore[arg-type]
    assert traj.termination == "model_error" and traj.metadata["model_error_reason"] == "backend"


async def test_token_exact_records_from_vllm_shapes() -> None:
    reply = text_reply(
        "hi",
        extra={
            "prompt_token_ids": [5, 6, 7],
            "prompt_logprobs": [
                None,
                {"6": {"logprob": -1.5, "rank": 2}, "9": {"logprob": -0.1, "rank": 1}},
                {"7": {"logprob": -0.25, "rank": 1}},
            ],
        },
        choice_extra={
            "token_ids": [11, 12],
            "logprobs": {
                "content": [
                    {"token": "h", "logprob": -0.5, "bytes": [104], "top_logprobs": []},
                    {"token": "i", "logprob": -0.0625, "bytes": [105], "top_logprobs": []},
                ]
            },
        },
    )
    with FakeOpenAIServer([reply]) as srv:
        model = OpenAICompatibleModel(
            base_url=srv.base_url,
            model="m",
            logprobs=True,
            top_logprobs=2,
            return_token_ids=True,
            prompt_logprobs=1,
        )
        try:
            resp = await model.chat(_opening(0), [], Sampling())
        finally:
            await model.aclose()
    body = srv.chat_requests[0]
    assert (
        body["logprobs"],
        body["top_logprobs"],
        body["return_token_ids"],
        body["prompt_logprobs"],
    ) == (True, 2, True, 1)
    assert resp.prompt_token_ids == [5, 6, 7] and resp.completion_token_ids == [11, 12]
    assert resp.completion_logprobs == [-0.5, -0.0625]
    assert resp.prompt_logprobs == [None, -1.5, -0.25]  # the prompt's own token, not the top one


async def test_token_fields_absent_when_not_served() -> None:
    with FakeOpenAIServer(
        [
            text_reply(
                "hi",
                choice_extra={"logprobs": {"content": "junk"}},
                extra={"prompt_token_ids": ["a"]},
            )
        ]
    ) as srv:
        model = OpenAICompatibleModel(base_url=srv.base_url, model="m")
        try:
            resp = await model.chat(_opening(0), [], Sampling())
        finally:
            await model.aclose()
    assert "logprobs" not in srv.chat_requests[0] and "return_token_ids" not in srv.chat_requests[0]
    assert resp.prompt_token_ids is None and resp.completion_logprobs is None


def test_trajectories_carry_turn_tokens_through_the_store(tasks: list[Any], tmp_path: Any) -> None:
    with LeanServer(calls=1, tool="calculate", tool_args={"expression": "1 + 1"}) as server:
        cfg = RolloutConfig(
            model=ModelConfig(
                kind="openai",
                name="m",
                base_urls=[server.base_url],
                logprobs=True,
                return_token_ids=True,
                prompt_logprobs=0,
                timeout_s=5,
            ),
            trials=1,
            concurrency=4,
        )
        trajs = collect(tasks[:3], cfg)
    for t in trajs:
        assert t.termination != "model_error", t.metadata
        assert len(t.turn_tokens) == t.usage.model_calls >= 2
        for tt in t.turn_tokens:
            assert t.messages[tt.message_index]["role"] == "assistant"
            assert tt.completion_token_ids and len(tt.completion_logprobs or []) == len(
                tt.completion_token_ids
            )
            assert tt.prompt_token_ids and len(tt.prompt_logprobs or []) == len(tt.prompt_token_ids)
            assert tt.prompt_logprobs[0] is None  # type: ignore[index]
    path = store.write_records(
        tmp_path,
        "trajectories",
        "trajectories",
        trajs,
        store.Lineage(config_hash="x", code_version="t"),
    )
    back = store.read_records(path, "trajectories")
    assert [t.turn_tokens for t in back] == [t.turn_tokens for t in trajs]


def test_bad_client_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompatibleModel(model="m")
    with pytest.raises(ValueError, match="duplicate"):
        OpenAICompatibleModel(base_urls=["http://a/v1", "http://a/v1"], model="m")
    with pytest.raises(ValueError, match="http"):
        OpenAICompatibleModel(base_url="ftp://a/v1", model="m")


async def test_history_with_a_malformed_call_is_sent_as_valid_json() -> None:
    """The agent keeps a malformed call's raw text as its arguments; strict servers
    (transformers serve, vLLM) would answer 500 to arguments that are not JSON."""
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "invalid_tool_call", "arguments": "<tool_call>{oops"},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a": 1}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "bad"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
    ]
    with FakeOpenAIServer([text_reply("ok")]) as srv:
        model = OpenAICompatibleModel(base_url=srv.base_url, model="m")
        try:
            await model.chat(history, [], Sampling())
        finally:
            await model.aclose()
    calls = srv.chat_requests[0]["messages"][1]["tool_calls"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"raw": "<tool_call>{oops"}
    assert calls[1]["function"]["arguments"] == '{"a": 1}'
    assert history[1]["tool_calls"][0]["function"]["arguments"] == "<tool_call>{oops"
