"""`rollout.http.HttpOrigin` against a raw socket server that sends exact bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from rollout.http import HttpConnectError, HttpOrigin, HttpProtocolError, HttpTimeout

pytestmark = pytest.mark.timeout(20)

Answer = Callable[[bytes], bytes | None]  # request bytes -> response bytes (None: close)


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Answer], asyncio.Future[str]]]:
    servers: list[asyncio.AbstractServer] = []

    async def start(answer: Answer) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    body = await reader.readexactly(length)
                    out = answer(head + body)
                    if out is None:
                        break
                    writer.write(out)
                    await writer.drain()
                    if out.startswith(b"HTTP/1.0") or b"\r\nX-Close: 1\r\n" in out:
                        break  # close the connection after this answer
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    yield start  # type: ignore[misc]
    for s in servers:
        s.close()


async def test_content_length_and_keep_alive(raw_server) -> None:  # type: ignore[no-untyped-def]
    seen: list[bytes] = []

    def answer(req: bytes) -> bytes:
        seen.append(req)
        return b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2\r\n\r\nhello"

    origin = HttpOrigin(await raw_server(answer))
    for _ in range(3):
        r = await origin.request(
            "POST", "/chat/completions", b'{"a":1}', {"Content-Type": "application/json"}
        )
        assert (r.status, r.body, r.headers["x-a"]) == (200, b"hello", "1, 2")
    assert origin.connections_opened == 1  # one keep-alive connection
    assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and seen[0].endswith(
        b'{"a":1}'
    )
    await origin.aclose()


async def test_chunked_and_until_close_bodies(raw_server) -> None:  # type: ignore[no-untyped-def]
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4;ext=1\r\nWiki\r\n6\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\n"
    )
    origin = HttpOrigin(await raw_server(lambda req: chunked))
    r = await origin.request("GET", "/x")
    assert r.body == b"Wikipedia in \r\n\r\nchunks."
    await origin.aclose()
    origin = HttpOrigin(await raw_server(lambda req: b"HTTP/1.0 200 OK\r\n\r\nuntil close"))
    assert (await origin.request("GET", "/x")).body == b"until close"
    await origin.aclose()


async def test_truncated_body_and_garbage_are_protocol_errors(raw_server) -> None:  # type: ignore[no-untyped-def]
    short = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nX-Close: 1\r\n\r\nshort"
    origin = HttpOrigin(await raw_server(lambda req: short))
    with pytest.raises(HttpProtocolError, match="before the response was complete"):
        await origin.request("GET", "/x", timeout_s=5)
    origin2 = HttpOrigin(await raw_server(lambda req: b"SMTP ready\r\n\r\n"))
    with pytest.raises(HttpProtocolError, match="bad status line"):
        await origin2.request("GET", "/x")
    await origin.aclose()
    await origin2.aclose()


async def test_stale_keep_alive_connection_is_replaced_once(raw_server) -> None:  # type: ignore[no-untyped-def]
    count = {"n": 0}

    def answer(req: bytes) -> bytes:
        count["n"] += 1
        return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok"

    url = await raw_server(answer)
    origin = HttpOrigin(url)
    await origin.request("GET", "/x")
    conn = origin._idle[0]
    assert conn.transport is not None
    conn.transport.close()  # as if the server had closed it while idle
    await asyncio.sleep(0.05)
    assert (await origin.request("GET", "/x")).body == b"ok"
    assert origin.connections_opened == 2
    await origin.aclose()


async def test_timeout_and_refused() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    origin = HttpOrigin(f"http://127.0.0.1:{port}")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(HttpTimeout):
        await origin.request("GET", "/", timeout_s=0.3)
    assert loop.time() - t0 < 1.0
    server.close()
    await origin.aclose()
    with pytest.raises(HttpConnectError):
        await HttpOrigin("http://127.0.0.1:9/").request("GET", "/", timeout_s=2)
