"""`rollout.model`: the `ChatModel` protocol every backend implements, the `ChatResponse` and
`MalformedCall` records, and `ModelError` with its reason."""

from __future__ import annotations

from typing import Any

import pytest

from data.records import Sampling, Task, ToolCall
from rollout.model import MODEL_ERROR_REASONS, ChatModel, ChatResponse, MalformedCall, ModelError
from rollout.policies import ScriptedPolicy


class _NoClose:
    name = "half"

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        return ChatResponse()


def test_chat_model_is_a_runtime_protocol(tasks: list[Task]) -> None:
    assert isinstance(ScriptedPolicy(tasks[0]), ChatModel)
    assert not isinstance(_NoClose(), ChatModel)  # no aclose
    assert not isinstance(object(), ChatModel)


def test_chat_response_defaults_and_round_trip() -> None:
    empty = ChatResponse()
    assert (empty.text, empty.tool_calls, empty.malformed, empty.finish_reason) == ("", [], [], "stop")
    assert empty.prompt_token_ids is None and empty.completion_logprobs is None and empty.raw == {}
    full = ChatResponse(text="hi", tool_calls=[ToolCall(name="a", arguments={"x": 1}, id="c0")],
                        malformed=[MalformedCall(error="bad_json", detail="d")], prompt_tokens=3,
                        completion_tokens=2, finish_reason="length", prompt_token_ids=[1, 2, 3],
                        completion_token_ids=[4, 5], completion_logprobs=[-0.1, -0.2],
                        prompt_logprobs=[None, -1.0, -2.0])
    assert ChatResponse.model_validate(full.model_dump(mode="json")) == full
    assert full.malformed[0].raw == ""


def test_model_error_carries_its_reason() -> None:
    err = ModelError("no answer", reason="timeout", endpoint="http://a/v1", attempts=3)
    assert isinstance(err, RuntimeError) and str(err) == "no answer"
    assert (err.reason, err.endpoint, err.attempts) == ("timeout", "http://a/v1", 3)
    plain = ModelError("load failed")
    assert (plain.reason, plain.endpoint, plain.attempts) == ("backend", None, 0)
    assert plain.reason in MODEL_ERROR_REASONS and len(set(MODEL_ERROR_REASONS)) == len(MODEL_ERROR_REASONS)
    with pytest.raises(ModelError, match="no answer"):
        raise err
