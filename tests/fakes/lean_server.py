#!/usr/bin/env python3
"""A fast OpenAI-compatible fake server with fault injection; standard library only
(orjson is used when present).

It runs in a background thread (`LeanServer`, for tests) or as a process
(`python tests/fakes/lean_server.py serve MODEL --port P ...`, for benchmarks, for
kill-and-restart tests, and as a stand-in for the `vllm` executable: it accepts and
ignores vLLM's flags and serves `GET /health`, `GET /v1/models` and
`POST /v1/chat/completions`; `GET /debug/argv` returns its command line).

Chat replies follow a tiny agent policy so that real agent loops run against it: while
the conversation has fewer than `calls` assistant turns it calls a tool (`tool`, default
the first tool in the request, with `tool_args`), then it asks "Anything else?", then it
says goodbye. With `return_token_ids`, `logprobs` or `prompt_logprobs` in the request it
returns deterministic token data in vLLM's shapes (token id = byte value).

Faults are consumed one per chat request, in order (`faults`), then `default_fault`:

- `ok`: a normal reply (after `delay_s`);
- `429`, `500`, `503`: an error status with `retry-after-ms: retry_ms`;
- `reset`: the connection is reset (RST) without a reply;
- `close`: the connection is closed without a reply;
- `truncate`: headers promise the whole body, half of it is sent, then close;
- `garbage`: a 200 whose body is not JSON;
- `stall`: no answer for `stall_s` (then a normal reply, if the client still waits).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

try:  # optional: decodes request bodies ~10x faster, so the fake keeps up at high load
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    _loads = json.loads

FAULTS = ("ok", "429", "500", "503", "reset", "close", "truncate", "garbage", "stall")


class LeanServer:
    """The fake server; use as a context manager (thread) or call `serve_forever` (process)."""

    def __init__(
        self,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        delay_s: float = 0.0,
        calls: int = 1,
        tool: str | None = None,
        tool_args: dict[str, Any] | None = None,
        faults: Iterable[str] = (),
        default_fault: str = "ok",
        stall_s: float = 30.0,
        retry_ms: int = 20,
        startup_s: float = 0.0,
        never_healthy: bool = False,
        argv: list[str] | None = None,
        record: bool = False,
    ) -> None:
        for f in [*faults, default_fault]:
            if f not in FAULTS:
                raise ValueError(f"unknown fault {f!r}; known: {FAULTS}")
        self.model = model
        self.host = host
        self.port = port
        self.delay_s = delay_s
        self.calls = calls
        self.tool = tool
        self.tool_args = tool_args or {}
        self.faults: deque[str] = deque(faults)
        self.default_fault = default_fault
        self.stall_s = stall_s
        self.retry_ms = retry_ms
        self.never_healthy = never_healthy
        self.argv = list(argv or [])
        self.chat_requests = 0
        self.faults_served: dict[str, int] = {}
        self.last_body: dict[str, Any] | None = None
        self.record = record
        self.bodies: list[dict[str, Any]] = []  # every chat request body, when `record`
        self.active = 0  # chat requests being answered now
        self.max_active = 0
        self._ready_at = time.monotonic() + startup_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle ----------------------------------------------------------------------

    async def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, backlog=2048, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def start(self) -> None:
        """Serve from a background thread (returns once listening)."""

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._start())
            self._started.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="lean-openai-server", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("lean server failed to start")

    def stop(self) -> None:
        """Stop listening and drop every open connection."""
        loop = self._loop
        if loop is None or self._thread is None:
            return

        def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.call_later(0.05, loop.stop)

        loop.call_soon_threadsafe(shutdown)
        self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> LeanServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_faults(self, *faults: str) -> None:
        for f in faults:
            if f not in FAULTS:
                raise ValueError(f"unknown fault {f!r}")
        self.faults.extend(faults)

    async def serve_forever(self) -> None:
        await self._start()
        print(f"lean server listening on {self.host}:{self.port}", flush=True)
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    # -- HTTP ---------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = (lines[0].split(" ") + ["", ""])[:2]
                length, close = 0, False
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    name = name.strip().lower()
                    if name == "content-length":
                        length = int(value.strip() or 0)
                    elif name == "connection" and "close" in value.lower():
                        close = True
                body = await reader.readexactly(length) if length else b""
                keep = await self._route(method, path, body, writer)
                if close or not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a cancelled handler ends quietly: the server is stopping
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must not be reused."""
        if method == "GET" and path == "/health":
            healthy = not self.never_healthy and time.monotonic() >= self._ready_at
            return await self._send(
                writer, 200 if healthy else 503, b"" if healthy else b"starting"
            )
        if method == "GET" and path == "/v1/models":
            data = {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "owned_by": "fake"}],
            }
            return await self._send(writer, 200, json.dumps(data).encode())
        if method == "GET" and path == "/debug/argv":
            return await self._send(writer, 200, json.dumps(self.argv).encode())
        if method == "POST" and path == "/v1/chat/completions":
            return await self._chat(body, writer)
        return await self._send(
            writer, 404, json.dumps({"error": {"message": "not found"}}).encode()
        )

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
    ) -> bool:
        head = [
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'ERR'}\r\n",
            "content-type: application/json\r\n",
            f"content-length: {len(body)}\r\n",
        ]
        head += [f"{k}: {v}\r\n" for k, v in (headers or {}).items()]
        writer.write("".join(head).encode() + b"\r\n" + body)
        await writer.drain()
        return True

    async def _chat(self, body: bytes, writer: asyncio.StreamWriter) -> bool:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            return await self._answer(body, writer)
        finally:
            self.active -= 1

    async def _answer(self, body: bytes, writer: asyncio.StreamWriter) -> bool:
        self.chat_requests += 1
        fault = self.faults.popleft() if self.faults else self.default_fault
        self.faults_served[fault] = self.faults_served.get(fault, 0) + 1
        try:
            request = _loads(body)
        except ValueError:
            return await self._send(writer, 400, b'{"error": {"message": "bad JSON"}}')
        self.last_body = request
        if self.record:
            self.bodies.append(request)
        if fault in ("429", "500", "503"):
            err = json.dumps({"error": {"message": f"fake fault {fault}", "code": int(fault)}})
            return await self._send(
                writer, int(fault), err.encode(), {"retry-after-ms": str(self.retry_ms)}
            )
        if fault == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if fault == "close":
            writer.close()
            return False
        if fault == "stall":
            await asyncio.sleep(self.stall_s)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if fault == "garbage":
            return await self._send(writer, 200, b"<html>502 bad gateway</html>")
        data = json.dumps(self.completion(request)).encode()
        if fault == "truncate":
            head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
            writer.write(head.encode() + data[: len(data) // 2])
            await writer.drain()
            writer.close()
            return False
        return await self._send(writer, 200, data)

    # -- replies ------------------------------------------------------------------------

    def completion(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply of the agent policy to `request` (see the module docstring)."""
        messages = request.get("messages") or []
        turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if turn < self.calls:
            tools = request.get("tools") or []
            name = self.tool or (tools[0]["function"]["name"] if tools else "lookup")
            message["tool_calls"] = [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(self.tool_args)},
                }
            ]
            text, finish = "", "tool_calls"
        elif turn == self.calls:
            text, finish = "I have checked that. Anything else?", "stop"
            message["content"] = text
        else:
            text, finish = "Goodbye.", "stop"
            message["content"] = text
        last = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else ""
        prompt = (str(last or "") + f"#{len(messages)}").encode()[-200:]
        completion_ids = list((text or json.dumps(message.get("tool_calls"))).encode()[:64])
        reply: dict[str, Any] = {
            "id": f"chatcmpl-lean-{self.chat_requests}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", self.model),
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(completion_ids),
                "total_tokens": len(prompt) + len(completion_ids),
            },
        }
        if request.get("return_token_ids"):
            reply["prompt_token_ids"] = list(prompt)
            reply["choices"][0]["token_ids"] = completion_ids
        if request.get("logprobs"):
            reply["choices"][0]["logprobs"] = {
                "content": [
                    {"token": chr(t), "logprob": -((t % 7) / 8), "bytes": [t], "top_logprobs": []}
                    for t in completion_ids
                ]
            }
        if request.get("prompt_logprobs") is not None:
            reply["prompt_logprobs"] = [None] + [
                {str(t): {"logprob": -((t % 5) / 4), "rank": 1, "decoded_token": chr(t)}}
                for t in prompt[1:]
            ]
        return reply


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", nargs="?", default="serve")
    ap.add_argument("model", nargs="?", default="fake-model")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--served-model-name", default=None)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--calls", type=int, default=1)
    ap.add_argument("--tool", default=None)
    ap.add_argument("--tool-args", default="{}")
    ap.add_argument("--faults", default="", help="comma-separated, consumed in order")
    ap.add_argument("--default-fault", default="ok")
    ap.add_argument("--stall-s", type=float, default=30.0)
    ap.add_argument("--startup-s", type=float, default=float(os.environ.get("LEAN_STARTUP_S", 0)))
    ap.add_argument(
        "--never-healthy", action="store_true", default=bool(os.environ.get("LEAN_NEVER_HEALTHY"))
    )
    ap.add_argument(
        "--die-after-s", type=float, default=float(os.environ.get("LEAN_DIE_AFTER_S", 0))
    )
    args, _unknown = ap.parse_known_args(argv)  # vLLM's other flags are accepted and ignored
    server = LeanServer(
        model=args.served_model_name or args.model,
        host=args.host,
        port=args.port,
        delay_s=args.delay_ms / 1000,
        calls=args.calls,
        tool=args.tool,
        tool_args=json.loads(args.tool_args),
        faults=[f for f in args.faults.split(",") if f],
        default_fault=args.default_fault,
        stall_s=args.stall_s,
        startup_s=args.startup_s,
        never_healthy=args.never_healthy,
        argv=argv,
    )

    async def run() -> None:
        if args.die_after_s > 0:
            asyncio.get_running_loop().call_later(args.die_after_s, os._exit, 3)
        await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
