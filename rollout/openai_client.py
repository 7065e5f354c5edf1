"""`ChatModel` backend for OpenAI-compatible chat completions servers (vLLM, SGLang,
llama.cpp server, `transformers serve`, OpenAI itself), built for many concurrent rollouts.

- **Several endpoints** (data-parallel replicas of one model). Each conversation is kept on
  one endpoint (rendezvous hashing of a conversation key: the system and first user
  message plus the sampling seed), so the server's prefix cache is reused turn after turn.
- **Bounded in-flight requests** per endpoint (`max_in_flight`); the wait for a slot is not
  part of the request timeout.
- **Per-request timeout** (`timeout_s`, default 60 s, against the SDK's 600 s), and
  **retries** (`max_retries`) with jittered exponential backoff on 429, 408/409, 5xx,
  connection errors, timeouts and unparseable replies; `Retry-After` / `retry-after-ms`
  are honoured, `x-should-retry: false` is obeyed.
- **A circuit breaker per endpoint**: open after `breaker_failures` consecutive failures,
  one half-open probe after `breaker_cooldown_s`. Conversations whose endpoint is open
  move to the next endpoint in their rendezvous order; a retry after a failure prefers
  another endpoint too. When every endpoint is open a request waits up to one cool-down,
  then fails with reason `circuit_open`.
- Every final failure is a `ModelError` with a `reason` (see `rollout.model`), the
  endpoint and the number of attempts; the agent loop records it on the trajectory.
- **Token-exact records** when asked for and served: `logprobs`/`top_logprobs` (OpenAI),
  vLLM's `return_token_ids` (`prompt_token_ids`, `choices[0].token_ids`) and
  `prompt_logprobs`; they come back on `ChatResponse`.
- Native `tool_calls` are decoded (a call reusing an earlier entry's id is
  `duplicate_call_id`, not run); without them the text is parsed (`rollout.parsing`): calls
  come only from call syntax, `<tool_call>` blocks or an output that is nothing but JSON
  calls, with `finish_reason` telling a call cut off at `max_tokens` (`truncated`) from a
  broken one. JSON calls in prose, forged tool responses and odd tags are classified.

The transport is `rollout.http` (the SDK costs ~8 ms of CPU per request; see that module);
the wire format (messages out, reply fields in) is `rollout.openai_wire`.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from data.records import Sampling
from rollout.http import (
    HttpConnectError,
    HttpError,
    HttpOrigin,
    HttpResponse,
    HttpTimeout,
)
from rollout.model import ChatResponse, ModelError
from rollout.openai_wire import clip as _clip
from rollout.openai_wire import completion_logprobs as _completion_logprobs
from rollout.openai_wire import count as _count
from rollout.openai_wire import dumps as _dumps
from rollout.openai_wire import error_message as _error_message
from rollout.openai_wire import int_list as _int_list
from rollout.openai_wire import loads as _loads
from rollout.openai_wire import prompt_logprobs as _prompt_logprobs
from rollout.openai_wire import retry_after as _retry_after
from rollout.openai_wire import to_openai_messages
from rollout.parsing import parse_model_output, tool_names_of

# A 400 that says the request does not fit the model's context (vLLM: "This model's maximum
# context length is N tokens ..."; OpenAI: code `context_length_exceeded`): not retried, and
# the episode ends on its own length (`context_exhausted`), not on infrastructure.
CONTEXT_LENGTH = re.compile(r"maximum context length|context_length_exceeded|context length exceeded", re.I)


class CircuitBreaker:
    """Closed → open after `failures` consecutive failures → half-open after `cooldown_s`
    (one probe request at a time) → closed on the probe's success, open again on failure."""

    def __init__(
        self,
        failures: int = 5,
        cooldown_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failures < 1 or cooldown_s < 0:
            raise ValueError("breaker needs failures >= 1 and cooldown_s >= 0")
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.state = "closed"
        self.consecutive = 0
        self.opened_at = 0.0
        self.probing = False
        self.times_opened = 0

    def try_acquire(self) -> bool:
        """May a request go to this endpoint now? (Claims the probe when half-open.)"""
        if self.state == "closed":
            return True
        if self.state == "open" and self.clock() - self.opened_at >= self.cooldown_s:
            self.state = "half_open"
        if self.state == "half_open" and not self.probing:
            self.probing = True
            return True
        return False

    def ready_in(self) -> float:
        """Seconds until `try_acquire` may succeed (0 when it may now)."""
        if self.state == "open":
            return max(0.0, self.opened_at + self.cooldown_s - self.clock())
        return 0.0 if self.state == "closed" or not self.probing else 0.05

    def record_success(self) -> None:
        self.state, self.consecutive, self.probing = "closed", 0, False

    def record_failure(self) -> None:
        self.consecutive += 1
        if self.state == "half_open" or self.consecutive >= self.threshold:
            if self.state != "open":
                self.times_opened += 1
            self.state, self.opened_at, self.probing = "open", self.clock(), False

    def release(self) -> None:
        """The request ended without telling whether the endpoint is healthy (cancelled)."""
        self.probing = False


@dataclass
class Endpoint:
    """One server: its connections, in-flight limit, breaker and counters."""

    url: str
    origin: HttpOrigin
    slots: asyncio.Semaphore
    breaker: CircuitBreaker
    requests: int = 0
    failures: int = 0
    in_flight: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class _Failure(Exception):
    """One failed attempt: why, whether to retry, how long the server asked us to wait."""

    def __init__(
        self,
        reason: str,
        message: str,
        retry: bool,
        retry_after: float | None = None,
        unhealthy: bool = True,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry = retry
        self.retry_after = retry_after
        self.unhealthy = unhealthy  # counts against the endpoint's breaker


class OpenAICompatibleModel:
    """Chat with tools against one or several OpenAI-compatible endpoints.

    `base_url` / `base_urls` include the API prefix (e.g. `http://127.0.0.1:8000/v1`).
    `extra_body` is merged into every request (e.g. vLLM's `{"chat_template_kwargs": ...}`).
    `chat(..., conversation_key=...)` overrides the derived key that pins a conversation.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str = "",
        api_key: str = "EMPTY",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        extra_body: dict[str, Any] | None = None,
        *,
        base_urls: Sequence[str] | None = None,
        max_in_flight: int = 64,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
        max_retry_after_s: float = 60.0,
        breaker_failures: int = 5,
        breaker_cooldown_s: float = 10.0,
        logprobs: bool = False,
        top_logprobs: int = 0,
        return_token_ids: bool = False,
        prompt_logprobs: int | None = None,
    ) -> None:
        urls = [u.rstrip("/") for u in (base_urls or ([base_url] if base_url else []))]
        if not urls:
            raise ValueError("OpenAICompatibleModel needs base_url or base_urls")
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate endpoint in {urls}")
        if not model:
            raise ValueError("OpenAICompatibleModel needs a model name")
        if timeout_s <= 0 or max_retries < 0 or max_in_flight < 1:
            raise ValueError("need timeout_s > 0, max_retries >= 0 and max_in_flight >= 1")
        if top_logprobs < 0 or (prompt_logprobs is not None and prompt_logprobs < 0):
            raise ValueError("top_logprobs and prompt_logprobs must be >= 0")
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = urls[0]
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_retry_after_s = max_retry_after_s
        self.extra_body = dict(extra_body or {})
        self.logprobs = logprobs or top_logprobs > 0
        self.top_logprobs = top_logprobs
        self.return_token_ids = return_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.endpoints = [
            Endpoint(
                url=u,
                origin=HttpOrigin(u, max_idle=max(8, max_in_flight)),
                slots=asyncio.Semaphore(max_in_flight),
                breaker=CircuitBreaker(breaker_failures, breaker_cooldown_s),
            )
            for u in urls
        ]
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Authorization": f"Bearer {api_key or 'EMPTY'}",
        }
        self._orders: dict[Any, list[Endpoint]] = {}
        self._rng = random.Random()

    # -- public -----------------------------------------------------------------------

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: Sampling,
        conversation_key: str | None = None,
    ) -> ChatResponse:
        body = _dumps(self._payload(messages, tools, sampling))
        order = self._order(conversation_key or _conversation_key(messages, sampling))
        failure: _Failure | None = None
        endpoint: Endpoint | None = None
        attempts = 0
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self._delay(attempt, failure))
                if failure is not None and failure.unhealthy and endpoint is not None:
                    order = [e for e in order if e is not endpoint] + [endpoint]
            endpoint = await self._pick(order, attempts)
            attempts += 1
            try:
                data = await self._attempt(endpoint, body)
            except _Failure as f:
                failure = f
                if not f.retry:
                    break
                continue
            return self._convert(data, endpoint, attempts, tools)
        assert failure is not None and endpoint is not None
        raise ModelError(
            f"{self.name} at {endpoint.url}: {failure} (after {attempts} attempt"
            f"{'s' if attempts != 1 else ''})",
            reason=failure.reason,
            endpoint=endpoint.url,
            attempts=attempts,
        )

    def stats(self) -> dict[str, Any]:
        """Per-endpoint counters and breaker states."""
        return {
            e.url: {
                "requests": e.requests,
                "failures": e.failures,
                "errors": dict(e.errors),
                "breaker": e.breaker.state,
                "breaker_opened": e.breaker.times_opened,
                "connections_opened": e.origin.connections_opened,
            }
            for e in self.endpoints
        }

    async def aclose(self) -> None:
        for e in self.endpoints:
            await e.origin.aclose()

    # -- request ----------------------------------------------------------------------

    def _payload(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(messages),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if tools:
            payload["tools"] = tools
        if sampling.seed is not None:
            payload["seed"] = sampling.seed
        if self.logprobs:
            payload["logprobs"] = True
            if self.top_logprobs:
                payload["top_logprobs"] = self.top_logprobs
        if self.return_token_ids:
            payload["return_token_ids"] = True
        if self.prompt_logprobs is not None:
            payload["prompt_logprobs"] = self.prompt_logprobs
        if self.extra_body:
            payload.update(self.extra_body)
        return payload

    def _order(self, key: Any) -> list[Endpoint]:
        """The conversation's endpoints by rendezvous weight: its home first."""
        if len(self.endpoints) == 1:
            return self.endpoints
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) > 100_000:
                self._orders.clear()
            order = sorted(self.endpoints, key=lambda e: hash((key, e.url)), reverse=True)
            self._orders[key] = order
        return order

    async def _pick(self, order: list[Endpoint], attempts: int) -> Endpoint:
        """The first endpoint in `order` whose breaker lets a request through; when none
        does, wait (at most about one cool-down) for one to half-open."""
        waited = 0.0
        while True:
            for e in order:
                if e.breaker.try_acquire():
                    return e
            wait = min(e.breaker.ready_in() for e in order)
            limit = max(e.breaker.cooldown_s for e in order) + 0.5
            if waited + wait > limit:
                urls = ", ".join(e.url for e in order)
                raise ModelError(
                    f"{self.name}: every endpoint's circuit breaker is open ({urls})",
                    reason="circuit_open",
                    endpoint=order[0].url,
                    attempts=attempts,
                )
            wait = max(wait, 0.01)
            await asyncio.sleep(wait)
            waited += wait

    async def _attempt(self, endpoint: Endpoint, body: bytes) -> dict[str, Any]:
        """One HTTP exchange; a decoded JSON object, or `_Failure`."""
        endpoint.requests += 1
        verdict: bool | None = None  # breaker verdict: True healthy, False unhealthy
        try:
            async with endpoint.slots:
                endpoint.in_flight += 1
                try:
                    response = await endpoint.origin.request(
                        "POST", "/chat/completions", body, self._headers, self.timeout_s
                    )
                finally:
                    endpoint.in_flight -= 1
            data = self._check(response)
            verdict = True
            return data
        except HttpTimeout as e:
            verdict = False
            raise self._failed(
                endpoint,
                _Failure("timeout", f"timed out ({self.timeout_s}s per attempt): {e}", True),
            ) from None
        except HttpConnectError as e:
            verdict = False
            raise self._failed(
                endpoint, _Failure("connection", f"connection failed: {e}", True)
            ) from None
        except HttpError as e:
            verdict = False
            raise self._failed(
                endpoint, _Failure("connection", f"connection broken: {e}", True)
            ) from None
        except _Failure as f:
            verdict = not f.unhealthy
            raise self._failed(endpoint, f) from None
        finally:
            if verdict is True:
                endpoint.breaker.record_success()
            elif verdict is False:
                endpoint.breaker.record_failure()
            else:
                endpoint.breaker.release()

    def _failed(self, endpoint: Endpoint, failure: _Failure) -> _Failure:
        endpoint.failures += 1
        endpoint.errors[failure.reason] = endpoint.errors.get(failure.reason, 0) + 1
        return failure

    def _check(self, response: HttpResponse) -> dict[str, Any]:
        """The JSON body of a 200, or the `_Failure` an error status stands for."""
        status, headers = response.status, response.headers
        should_retry = headers.get("x-should-retry", "").lower()
        if status == 200:
            try:
                data = _loads(response.body)
            except (ValueError, RecursionError) as e:
                raise _Failure(
                    "bad_response", f"reply is not JSON ({e}): {_clip(repr(response.body))}", True
                ) from None
            if not isinstance(data, dict):
                raise _Failure(
                    "bad_response",
                    f"reply is not a chat completion: {_clip(repr(data))}",
                    False,
                    unhealthy=False,
                )
            return data
        detail = _error_message(response.body)
        message = f"HTTP {status}: {_clip(detail)}"
        retry_after = _retry_after(headers)
        if status == 429:
            failure = _Failure("rate_limited", message, True, retry_after, unhealthy=False)
        elif status == 408:
            failure = _Failure("timeout", message, True, retry_after)
        elif status >= 500:
            failure = _Failure("server_error", message, True, retry_after)
        elif status == 409:
            failure = _Failure("server_error", message, True, retry_after, unhealthy=False)
        elif status == 400 and CONTEXT_LENGTH.search(detail):
            failure = _Failure("context_length", message, False, unhealthy=False)
        else:
            failure = _Failure("client_error", message, False, unhealthy=False)
        if should_retry == "false":
            failure.retry = False
        elif should_retry == "true":
            failure.retry = True
        if failure.retry_after is not None and failure.retry_after > self.max_retry_after_s:
            failure.retry = False  # the server wants us away for longer than we wait
        raise failure

    def _delay(self, attempt: int, failure: _Failure | None) -> float:
        """Seconds before retry `attempt` (1-based): the server's Retry-After if it gave
        one, else exponential backoff with jitter (half fixed, half random)."""
        if failure is not None and failure.retry_after is not None:
            return failure.retry_after * (1 + 0.1 * self._rng.random())
        cap = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        return cap / 2 + self._rng.random() * cap / 2

    # -- reply ------------------------------------------------------------------------

    def _convert(self, data: dict[str, Any], endpoint: Endpoint, attempts: int,
                 tools: list[dict[str, Any]] | None = None) -> ChatResponse:
        """Turn a chat completion into a `ChatResponse`, checking its shape by hand."""

        def bad(what: str) -> ModelError:
            return ModelError(
                f"{self.name} at {endpoint.url}: {what}",
                reason="bad_response",
                endpoint=endpoint.url,
                attempts=attempts,
            )

        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise bad(f"reply has no choices: {_clip(repr(data))}")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise bad(f"reply choice has no message: {_clip(repr(choice))}")
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        native = message.get("tool_calls") or []
        if not isinstance(native, list):
            raise bad(f"reply tool_calls is not a list: {_clip(repr(native))}")
        finish = str(choice.get("finish_reason") or "stop")
        parsed = parse_model_output(text, finish_reason=finish, native=native,
                                    tool_names=tool_names_of(tools))
        text, calls, malformed = parsed.text, parsed.calls, parsed.malformed
        usage = data.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        prompt_ids = _int_list(data.get("prompt_token_ids"))
        return ChatResponse(
            text=text,
            tool_calls=calls,
            malformed=malformed,
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            finish_reason=finish,
            raw={"id": data.get("id"), "model": data.get("model")},
            prompt_token_ids=prompt_ids,
            completion_token_ids=_int_list(choice.get("token_ids")),
            completion_logprobs=_completion_logprobs(choice.get("logprobs")),
            prompt_logprobs=_prompt_logprobs(data.get("prompt_logprobs"), prompt_ids),
        )


def _conversation_key(messages: list[dict[str, Any]], sampling: Sampling) -> Any:
    """What stays the same across one conversation's turns: its opening and its seed."""
    first = messages[0].get("content") if messages else None
    second = messages[1].get("content") if len(messages) > 1 else None
    return (
        first if isinstance(first, str) else repr(first),
        second if isinstance(second, str) else repr(second),
        sampling.seed,
    )
