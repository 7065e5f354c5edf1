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
    """One assistant turn. The token fields are filled only when the server returns them
    (vLLM's `return_token_ids`, `logprobs`, `prompt_logprobs`); they are token-exact."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    malformed: list[MalformedCall] = Field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    raw: dict[str, Any] = Field(default_factory=dict)
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    prompt_logprobs: list[float | None] | None = None  # first prompt token has none


# Why a backend gave up; recorded on the trajectory as metadata["model_error_reason"].
MODEL_ERROR_REASONS = (
    "timeout",  # no complete answer within the per-request timeout
    "connection",  # refused, reset or closed mid-answer
    "rate_limited",  # HTTP 429 after every retry
    "server_error",  # HTTP 5xx after every retry
    "client_error",  # HTTP 4xx other than 429: the request itself is wrong
    "bad_response",  # a 200 that is not a chat completion
    "circuit_open",  # every endpoint's circuit breaker is open
    "context_length",  # the conversation no longer fits the model's context: the episode's doing, not infrastructure
    "backend",  # anything else (model load failure, generation failure)
)


class ModelError(RuntimeError):
    """The backend failed for good (after its own retries); the episode records it.

    `reason` is one of `MODEL_ERROR_REASONS`; `endpoint` and `attempts` say where and
    how often it was tried (when the backend is remote).
    """

    def __init__(
        self,
        message: str,
        reason: str = "backend",
        endpoint: str | None = None,
        attempts: int = 0,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.endpoint = endpoint
        self.attempts = attempts


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
