"""The `ChatResponse` of a local engine (the embedded engine, offline vLLM) from the text it
decoded: tool calls parsed, and the finish reason said the way the API servers say it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rollout.model import ChatResponse
from rollout.parsing import parse_tool_calls


def decoded_response(completion: str, finish: str | None, prompt_tokens: int, completion_tokens: int,
                     raw: dict[str, Any], tool_names: Iterable[str] | None = None, **tokens: Any) -> ChatResponse:
    """`completion` parsed into text, tool calls and malformed calls. `finish` is the engine's
    reason to stop ("length": cut at max_tokens, a call cut short is `truncated`; None: "stop");
    a stop after tool calls is "tool_calls". `tokens`: the response's token records."""
    text, calls, malformed = parse_tool_calls(completion, finish, tool_names)
    finish = finish or "stop"
    return ChatResponse(
        text=text,
        tool_calls=calls,
        malformed=malformed,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        finish_reason="tool_calls" if calls and finish == "stop" else finish,
        raw=raw,
        **tokens,
    )
