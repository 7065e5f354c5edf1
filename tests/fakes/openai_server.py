"""A scripted, loopback-only fake of an OpenAI-compatible chat server, for tests.

`FakeOpenAIServer` serves `POST /v1/chat/completions` and `GET /v1/models` on
127.0.0.1 (a free port) from a background thread. Each chat request consumes the next
scripted `Reply` in order: a text answer, native tool calls, an HTTP error status, or a
verbatim body, optionally after a delay. Every request is recorded. When the script
runs out the server answers 500 with `x-should-retry: false`, so a test that asks for
more than it scripted fails fast and clearly.

    with FakeOpenAIServer([text_reply("hi"), error_reply(500), tool_reply(...)]) as srv:
        client = OpenAICompatibleModel(base_url=srv.base_url, model="fake")
        ...
        assert srv.requests[0].body["messages"][0]["role"] == "system"
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

LOOPBACK = "127.0.0.1"


@dataclass
class Reply:
    """One scripted answer to a chat completion request.

    `status` other than 200 answers with an OpenAI-style error body. `body`, when set,
    is sent verbatim as JSON (for malformed-response tests). `tool_calls` entries are
    `{"name": ..., "arguments": dict | str, "id": ...}`; a string `arguments` is sent
    as is (so it can be bad JSON), a missing `name` is left out of the call.
    `retry_after_s` sets `retry-after-ms` on error replies so SDK retries are quick.
    `extra` and `choice_extra` add fields to the completion and its first choice (e.g.
    vLLM's `prompt_token_ids`, `prompt_logprobs`, `token_ids`, `logprobs`).
    """

    text: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    delay_s: float = 0.0
    finish_reason: str | None = None
    prompt_tokens: int = 11
    completion_tokens: int = 7
    body: Any = None
    retry_after_s: float | None = 0.01
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the completion
    choice_extra: dict[str, Any] = field(default_factory=dict)  # merged into choices[0]


def text_reply(text: str, **kw: Any) -> Reply:
    return Reply(text=text, **kw)


def tool_reply(
    name: str | None, arguments: dict[str, Any] | str, call_id: str = "call_0", **kw: Any
) -> Reply:
    """A reply with one native tool call."""
    call: dict[str, Any] = {"id": call_id, "arguments": arguments}
    if name is not None:
        call["name"] = name
    return Reply(tool_calls=[call], **kw)


def error_reply(status: int = 500, **kw: Any) -> Reply:
    return Reply(status=status, **kw)


def delay_reply(delay_s: float, text: str = "late", **kw: Any) -> Reply:
    return Reply(text=text, delay_s=delay_s, **kw)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeOpenAIServer:
    """Scripted OpenAI-compatible server on 127.0.0.1; use as a context manager."""

    def __init__(self, replies: Iterable[Reply] = (), model: str = "fake-model") -> None:
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._replies: deque[Reply] = deque(replies)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._counter = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- script -------------------------------------------------------------------------

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self._replies.extend(replies)

    def reset(self, *replies: Reply) -> None:
        """Forget the script, the recorded requests and the reply counter; then script
        `replies` (lets one started server serve many tests)."""
        with self._lock:
            self._replies = deque(replies)
            self.requests = []
            self._counter = 0

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._replies)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """JSON bodies of the chat completion requests received, in order."""
        return [r.body for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(),
            host=LOOPBACK,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake OpenAI server failed to start")
            time.sleep(0.01)

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- app ----------------------------------------------------------------------------

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models(request: Request) -> Response:
            self._record(request, None)
            return JSONResponse(
                {
                    "object": "list",
                    "data": [
                        {"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}
                    ],
                }
            )

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            try:
                body = await request.json()
            except ValueError:
                body = (await request.body()).decode(errors="replace")
            self._record(request, body)
            with self._lock:
                reply = self._replies.popleft() if self._replies else None
                self._counter += 1
                n = self._counter
            if reply is None:
                return _error(
                    500, "fake server: no scripted reply left", {"x-should-retry": "false"}
                )
            await self._sleep(reply.delay_s)
            headers: dict[str, str] = {}
            if reply.retry_after_s is not None and reply.status != 200:
                headers["retry-after-ms"] = str(int(reply.retry_after_s * 1000))
            if reply.body is not None:
                return JSONResponse(reply.body, status_code=reply.status, headers=headers)
            if reply.status != 200:
                return _error(reply.status, f"fake server: scripted {reply.status}", headers)
            model = body.get("model", self.model) if isinstance(body, dict) else self.model
            return JSONResponse(_completion(reply, n, model))

        return app

    def _record(self, request: Request, body: Any) -> None:
        rec = RecordedRequest(request.method, request.url.path, dict(request.headers), body)
        with self._lock:
            self.requests.append(rec)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake early when the server is stopping."""
        end = time.monotonic() + seconds
        while not self._stopping.is_set() and (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.05))


def _error(status: int, message: str, headers: dict[str, str]) -> Response:
    body = {"error": {"message": message, "type": "fake_error", "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def _completion(reply: Reply, n: int, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        calls = []
        for i, call in enumerate(reply.tool_calls):
            args = call.get("arguments", {})
            function: dict[str, Any] = {
                "arguments": args if isinstance(args, str) else json.dumps(args)
            }
            if "name" in call:
                function["name"] = call["name"]
            calls.append(
                {"id": call.get("id", f"call_{i}"), "type": "function", "function": function}
            )
        message["tool_calls"] = calls
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    return {
        "id": f"chatcmpl-fake-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice | reply.choice_extra],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    } | reply.extra


@pytest.fixture
def fake_openai_server() -> Iterator[FakeOpenAIServer]:
    """A started, empty-script fake server; script it with `.add(...)`."""
    with FakeOpenAIServer() as server:
        yield server
