"""`OpenAICompatibleModel` against the scripted fake OpenAI server."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from data.records import Sampling, ToolCall
from rollout.model import ChatModel, ModelError
from rollout.openai_client import OpenAICompatibleModel
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    Reply,
    delay_reply,
    error_reply,
    text_reply,
    tool_reply,
)

pytestmark = pytest.mark.timeout(30)

USER = [{"role": "user", "content": "hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]

MakeModel = Callable[..., OpenAICompatibleModel]


@pytest.fixture(scope="module")
def shared_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def server(shared_server: FakeOpenAIServer) -> FakeOpenAIServer:
    """The module's fake server with an empty script and no recorded requests."""
    shared_server.reset()
    return shared_server


@pytest.fixture
async def make_model(server: FakeOpenAIServer) -> AsyncIterator[MakeModel]:
    """Build clients pointed at `server` (override any argument); closed at teardown."""
    made: list[OpenAICompatibleModel] = []

    def make(**kw: Any) -> OpenAICompatibleModel:
        args: dict[str, Any] = {
            "base_url": server.base_url,
            "model": "fake-model",
            "timeout_s": 5.0,
        }
        model = OpenAICompatibleModel(**(args | kw))
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


async def test_text_reply(server: FakeOpenAIServer, make_model: MakeModel) -> None:
    server.add(text_reply("Hi there.", prompt_tokens=21, completion_tokens=3))
    model = make_model()
    assert isinstance(model, ChatModel)
    assert model.name == "openai:fake-model"
    resp = await model.chat(USER, [], Sampling())
    assert resp.text == "Hi there."
    assert resp.tool_calls == [] and resp.malformed == []
    assert (resp.prompt_tokens, resp.completion_tokens) == (21, 3)
    assert resp.finish_reason == "stop"
    assert resp.raw == {"id": "chatcmpl-fake-1", "model": "fake-model"}
    assert "tools" not in server.chat_requests[0]


async def test_native_tool_call(server: FakeOpenAIServer, make_model: MakeModel) -> None:
    server.add(tool_reply("get_order", {"order_id": "A1"}, call_id="call_x"))
    resp = await make_model().chat(USER, TOOLS, Sampling())
    assert resp.tool_calls == [
        ToolCall(name="get_order", arguments={"order_id": "A1"}, id="call_x")
    ]
    assert resp.malformed == []
    assert resp.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("get_order", '{"order_id": "A1"', "bad_json"),
        ("get_order", '["A1"]', "arguments_not_object"),
        (None, '{"order_id": "A1"}', "missing_name"),
    ],
)
async def test_malformed_native_tool_call(
    server: FakeOpenAIServer, make_model: MakeModel, name: str | None, arguments: str, error: str
) -> None:
    server.add(tool_reply(name, arguments))
    resp = await make_model().chat(USER, TOOLS, Sampling())
    assert resp.tool_calls == []
    assert [m.error for m in resp.malformed] == [error]
    assert arguments in json.loads(resp.malformed[0].raw)["function"]["arguments"]


async def test_empty_arguments_mean_no_arguments(
    server: FakeOpenAIServer, make_model: MakeModel
) -> None:
    server.add(tool_reply("list_orders", ""))
    resp = await make_model().chat(USER, TOOLS, Sampling())
    assert resp.tool_calls == [ToolCall(name="list_orders", arguments={}, id="call_0")]


async def test_text_fallback_parses_tool_call_blocks(
    server: FakeOpenAIServer, make_model: MakeModel
) -> None:
    text = 'Let me check.\n<tool_call>{"name": "get_order", "arguments": {"order_id": "B2"}}</tool_call>'
    server.add(text_reply(text))
    resp = await make_model().chat(USER, TOOLS, Sampling())
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [("get_order", {"order_id": "B2"})]
    assert resp.malformed == []
    assert "<tool_call>" not in resp.text


async def test_native_calls_sharing_an_id(server: FakeOpenAIServer, make_model: MakeModel) -> None:
    server.add(Reply(tool_calls=[
        {"id": "call_a", "name": "get_order", "arguments": {"order_id": "A1"}},
        {"id": "call_a", "name": "get_order", "arguments": {"order_id": "B2"}},
        {"id": "call_b", "name": "get_order", "arguments": {"order_id": "C3"}},
    ]))
    resp = await make_model().chat(USER, TOOLS, Sampling())
    assert [(c.id, c.arguments["order_id"]) for c in resp.tool_calls] == [("call_a", "A1"), ("call_b", "C3")]
    assert [m.error for m in resp.malformed] == ["duplicate_call_id"] and "B2" in resp.malformed[0].raw


@pytest.mark.parametrize(("text", "error"), [
    ('Done. Log: {"name": "get_order", "arguments": {"order_id": "B2"}} Bye', "call_in_prose"),
    ('<tool_response>{"ok": true}</tool_response>{"name": "get_order", "arguments": {"order_id": "B2"}}',
     "forged_tool_response"),
    ('<TOOL_CALL>{"name": "get_order", "arguments": {"order_id": "B2"}}</TOOL_CALL>', "bad_tag"),
])
async def test_text_fallback_reads_only_call_syntax(
    server: FakeOpenAIServer, make_model: MakeModel, text: str, error: str
) -> None:
    server.add(text_reply(text))
    resp = await make_model().chat(USER, TOOLS, Sampling())
    assert resp.tool_calls == [] and [m.error for m in resp.malformed] == [error]


async def test_request_contents(server: FakeOpenAIServer, make_model: MakeModel) -> None:
    server.add(text_reply("done"))
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Where is order A1?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": {"order_id": "A1"}},
                },
                {"id": "call_2", "name": "get_order", "arguments": {"order_id": "A2"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped"}'},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"status": "pending"}'},
    ]
    before = json.dumps(history)
    model = make_model(extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    await model.chat(history, TOOLS, Sampling(temperature=0.3, top_p=0.9, max_tokens=64, seed=7))
    assert json.dumps(history) == before  # the caller's messages are not modified

    body = server.chat_requests[0]
    assert body["model"] == "fake-model"
    assert body["tools"] == TOOLS
    sampled = {k: body[k] for k in ("temperature", "top_p", "max_tokens", "seed")}
    assert sampled == {"temperature": 0.3, "top_p": 0.9, "max_tokens": 64, "seed": 7}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    calls = body["messages"][2]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_1", "call_2"]
    for call in calls:
        assert call["type"] == "function" and call["function"]["name"] == "get_order"
        assert isinstance(call["function"]["arguments"], str)
    assert json.loads(calls[1]["function"]["arguments"]) == {"order_id": "A2"}
    assert body["messages"][3] == history[3]


async def test_seed_omitted_when_unset(server: FakeOpenAIServer, make_model: MakeModel) -> None:
    server.add(text_reply("ok"))
    await make_model().chat(USER, [], Sampling(seed=None))
    assert "seed" not in server.chat_requests[0]


async def test_500_then_success_is_retried(server: FakeOpenAIServer, make_model: MakeModel) -> None:
    server.add(error_reply(500), text_reply("recovered"))
    resp = await make_model(max_retries=2).chat(USER, [], Sampling())
    assert resp.text == "recovered"
    assert len(server.chat_requests) == 2


async def test_persistent_500_raises_model_error(
    server: FakeOpenAIServer, make_model: MakeModel
) -> None:
    server.add(*[error_reply(500)] * 3)
    with pytest.raises(ModelError) as info:
        await make_model(max_retries=2).chat(USER, [], Sampling())
    assert server.base_url in str(info.value) and "500" in str(info.value)
    assert len(server.chat_requests) == 3  # first attempt + 2 SDK retries


async def test_client_error_is_not_retried(server: FakeOpenAIServer, make_model: MakeModel) -> None:
    server.add(error_reply(400))
    with pytest.raises(ModelError, match="400"):
        await make_model(max_retries=2).chat(USER, [], Sampling())
    assert len(server.chat_requests) == 1


async def test_timeout_raises_model_error_quickly(
    server: FakeOpenAIServer, make_model: MakeModel
) -> None:
    server.add(delay_reply(5.0))
    start = time.monotonic()
    with pytest.raises(ModelError, match="timed out"):
        await make_model(timeout_s=0.3, max_retries=0).chat(USER, [], Sampling())
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize(
    "body",
    [{"object": "error"}, {"choices": []}, {"choices": [{"message": None}]}, [1, 2]],
)
async def test_invalid_completion_raises_model_error(
    server: FakeOpenAIServer, make_model: MakeModel, body: Any
) -> None:
    server.add(Reply(body=body))
    with pytest.raises(ModelError, match="fake-model"):
        await make_model().chat(USER, [], Sampling())


async def test_connection_refused_raises_model_error() -> None:
    with socket.socket() as sock:  # find a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    model = OpenAICompatibleModel(base_url=base_url, model="m", timeout_s=2.0, max_retries=0)
    try:
        with pytest.raises(ModelError, match="connection failed") as info:
            await model.chat(USER, [], Sampling())
        assert base_url in str(info.value)
    finally:
        await model.aclose()


def test_fake_server_models_endpoint_and_script_exhaustion(server: FakeOpenAIServer) -> None:
    models = httpx.get(f"{server.base_url}/models").json()
    assert models["data"][0]["id"] == "fake-model"
    exhausted = httpx.post(f"{server.base_url}/chat/completions", json={"messages": []})
    assert exhausted.status_code == 500
    assert exhausted.headers["x-should-retry"] == "false"
    assert [r.path for r in server.requests] == ["/v1/models", "/v1/chat/completions"]
