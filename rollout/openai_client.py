"""`ChatModel` backend for any OpenAI-compatible chat completions server (vLLM, SGLang,
llama.cpp server, OpenAI itself) via the `openai` SDK's `AsyncOpenAI`.

Native `tool_calls` in the reply are decoded into `ToolCall`s; when the reply has none,
`<tool_call>{json}</tool_call>` blocks in the text are parsed instead (for servers
started without a tool parser). Undecodable calls come back as `MalformedCall`s. The
SDK retries connection errors, timeouts, 408/409/429 and 5xx itself; whatever still
fails is raised as `ModelError`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import openai
from openai import AsyncOpenAI

from data.records import Sampling
from rollout.model import ChatResponse, ModelError
from rollout.parsing import decode_native_tool_calls, parse_tool_calls


class OpenAICompatibleModel:
    """Chat with tools against an OpenAI-compatible endpoint.

    `base_url` includes the API prefix (e.g. `http://127.0.0.1:8000/v1`). `timeout_s`
    bounds each HTTP attempt; `max_retries` is the SDK's retry count on top of the first
    attempt. `extra_body` is merged into every request (e.g. vLLM's
    `{"chat_template_kwargs": {...}}`).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.name = f"openai:{model}"
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body or {})
        self._client = AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "EMPTY",
            timeout=timeout_s,
            max_retries=max_retries,
        )

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: Sampling,
    ) -> ChatResponse:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(messages),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if tools:
            kwargs["tools"] = tools
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        try:
            completion = await self._client.chat.completions.create(**kwargs)
        except openai.APITimeoutError as e:
            raise ModelError(
                f"{self.name} at {self.base_url}: timed out ({self.timeout_s}s per attempt,"
                f" {self._client.max_retries + 1} attempts)"
            ) from e
        except openai.APIStatusError as e:
            raise ModelError(
                f"{self.name} at {self.base_url}: HTTP {e.status_code}: {_clip(e.message)}"
            ) from e
        except openai.APIConnectionError as e:
            cause = e.__cause__ or e
            raise ModelError(
                f"{self.name} at {self.base_url}: connection failed: {_clip(repr(cause))}"
            ) from e
        except openai.OpenAIError as e:
            raise ModelError(
                f"{self.name} at {self.base_url}: {type(e).__name__}: {_clip(str(e))}"
            ) from e
        return self._convert(completion)

    def _convert(self, completion: Any) -> ChatResponse:
        """Turn the SDK's reply into a `ChatResponse`, checking its shape by hand (the SDK
        does not validate responses)."""
        data = completion.to_dict(warnings=False) if hasattr(completion, "to_dict") else completion
        if not isinstance(data, dict):
            raise ModelError(
                f"{self.name} at {self.base_url}: reply is not a chat completion:"
                f" {_clip(repr(data))}"
            )
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ModelError(
                f"{self.name} at {self.base_url}: reply has no choices: {_clip(repr(data))}"
            )
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ModelError(
                f"{self.name} at {self.base_url}: reply choice has no message:"
                f" {_clip(repr(choices[0]))}"
            )
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        native = message.get("tool_calls") or []
        if not isinstance(native, list):
            raise ModelError(
                f"{self.name} at {self.base_url}: reply tool_calls is not a list:"
                f" {_clip(repr(native))}"
            )
        if native:
            calls, malformed = decode_native_tool_calls(native)
        else:
            text, calls, malformed = parse_tool_calls(text)
        usage = data.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        return ChatResponse(
            text=text,
            tool_calls=calls,
            malformed=malformed,
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            finish_reason=str(choices[0].get("finish_reason") or "stop"),
            raw={"id": data.get("id"), "model": data.get("model")},
        )

    async def aclose(self) -> None:
        await self._client.close()


def to_openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy `messages`, normalising assistant `tool_calls` to the wire format: each call
    `{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}`.
    Flat `{"name", "arguments", "id"}` calls (as in `ToolCall`) are accepted too."""
    out: list[dict[str, Any]] = []
    for message in messages:
        message = copy.deepcopy(message)
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and calls:
            message["tool_calls"] = [_wire_call(call, i) for i, call in enumerate(calls)]
        out.append(message)
    return out


def _wire_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict):
        function = {"name": call.get("name", ""), "arguments": call.get("arguments", {})}
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": call.get("id") or f"call_{index}",
        "type": call.get("type", "function"),
        "function": {**function, "arguments": arguments},
    }


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _count(value: Any) -> int:
    """A token count from the reply; 0 when absent or not a number."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
