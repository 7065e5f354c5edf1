"""The `ChatModel` interface every model backend implements.

A backend takes OpenAI-format messages, OpenAI-format tool schemas and sampling
settings, and returns text, parsed tool calls and token usage. Backends never raise on
malformed model output: a call that cannot be parsed comes back in `malformed` with its
error class, and the agent loop turns it into an observation.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from data.records import Sampling, ToolCall


class MalformedCall(BaseModel):
    """A tool call the model tried to make but that could not be parsed."""

    error: str  # error class: bad_json, missing_name, arguments_not_object, ...
    detail: str
    raw: str = ""


class ChatResponse(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    malformed: list[MalformedCall] = Field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    raw: dict[str, Any] = Field(default_factory=dict)


class ModelError(RuntimeError):
    """The backend failed for good (after its own retries); the episode records it."""


@runtime_checkable
class ChatModel(Protocol):
    """Async chat completion with tools."""

    name: str

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: Sampling,
    ) -> ChatResponse: ...

    async def aclose(self) -> None: ...
