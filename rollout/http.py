"""A small asyncio HTTP/1.1 client for one origin: keep-alive connections, one deadline per
request, `Content-Length`, chunked and read-until-close bodies, http and https.

Why not httpx or the `openai` SDK: measured on this machine against a zero-latency server,
the SDK spends ~8 ms of CPU per chat request and httpx 2-7 ms (its pool grows slower with
concurrency); this client spends ~0.3 ms, which is what lets one event loop drive hundreds
of conversations (see bench/rollout_overhead.py). It knows only what an OpenAI-compatible
JSON API needs; it never follows redirects and never retries a request that the server may
have started to answer (the caller's retry policy decides).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024


class HttpError(Exception):
    """A request that produced no usable HTTP response."""


class HttpConnectError(HttpError):
    """No connection could be made (refused, unreachable, DNS, TLS)."""


class HttpTimeout(HttpError):
    """The request's deadline passed (connecting, sending or waiting for the answer)."""


class HttpProtocolError(HttpError):
    """The connection broke or the server sent something that is not HTTP/1.1: a reset,
    a close before the body was complete, a malformed status line or chunk."""

    def __init__(self, message: str, started: bool = True) -> None:
        super().__init__(message)
        self.started = started  # False: not one byte of the response arrived


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _UNTIL_CLOSE = range(6)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time into `self.future`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.future: asyncio.Future[HttpResponse] | None = None
        self.closed = False
        self.reusable = True
        self.head_only = False
        self._buf = bytearray()
        self._state = _HEAD
        self._started = False
        self._status = 0
        self._headers: dict[str, str] = {}
        self._left = 0
        self._body = bytearray()
        self._keep_alive = True

    # -- asyncio callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.future is None:  # bytes nobody asked for: the connection is out of step
            self.reusable = False
            self._close()
            return
        self._started = True
        self._buf += data
        try:
            self._parse()
        except HttpProtocolError as e:
            self._fail(e)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self.future is None or self.future.done():
            return
        if self._state == _UNTIL_CLOSE:
            self._complete()
            return
        why = f"connection lost ({exc})" if exc else "connection closed by the server"
        if self._started:
            why += " before the response was complete"
        self._fail(HttpProtocolError(why, started=self._started))

    # -- one exchange ---------------------------------------------------------------------

    def begin(self, future: asyncio.Future[HttpResponse], head_only: bool) -> None:
        self.future = future
        self.head_only = head_only
        self._state, self._started, self._body = _HEAD, False, bytearray()
        self._status, self._headers, self._keep_alive = 0, {}, True

    def _complete(self) -> None:
        fut, self.future = self.future, None
        if self._buf or not self._keep_alive:
            self.reusable = False  # pipelined junk or `Connection: close`
        if fut is not None and not fut.done():
            fut.set_result(HttpResponse(self._status, self._headers, bytes(self._body)))

    def _fail(self, error: HttpError) -> None:
        fut, self.future = self.future, None
        self.reusable = False
        self._close()
        if fut is not None and not fut.done():
            fut.set_exception(error)

    def abort(self) -> None:
        """Drop the connection at once (after a timeout or a cancelled request)."""
        self.reusable = False
        self.future = None
        if self.transport is not None:
            self.transport.abort()

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # -- parsing --------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        while self.future is not None:
            state = self._state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEADER_BYTES:
                        raise HttpProtocolError("response headers too large")
                    return
                self._read_head(bytes(buf[:end]))
                del buf[: end + 4]
            elif state == _LENGTH:
                if len(buf) < self._left:
                    return
                self._body = buf[: self._left]
                del buf[: self._left]
                self._complete()
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 1024:
                        raise HttpProtocolError("bad chunk size line")
                    return
                line = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    size = int(line, 16)
                except ValueError:
                    raise HttpProtocolError(f"bad chunk size {line[:20]!r}") from None
                if size < 0:
                    raise HttpProtocolError("negative chunk size")
                if size == 0:
                    self._state = _TRAILER
                else:
                    if len(self._body) + size > MAX_BODY_BYTES:
                        raise HttpProtocolError("response body too large")
                    self._left, self._state = size, _CHUNK_DATA
            elif state == _CHUNK_DATA:
                if len(buf) < self._left + 2:
                    return
                if buf[self._left : self._left + 2] != b"\r\n":
                    raise HttpProtocolError("chunk not followed by CRLF")
                self._body += buf[: self._left]
                del buf[: self._left + 2]
                self._state = _CHUNK_SIZE
            elif state == _TRAILER:
                if buf[:2] == b"\r\n":
                    del buf[:2]
                    self._complete()
                    continue
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                del buf[: end + 4]
                self._complete()
            else:  # _UNTIL_CLOSE
                if len(buf) > MAX_BODY_BYTES:
                    raise HttpProtocolError("response body too large")
                self._body += buf
                del buf[:]
                return

    def _read_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HttpProtocolError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpProtocolError(f"bad header line {line[:80]!r}")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if 100 <= status < 200:  # interim response (100 Continue): wait for the real one
            return
        self._status, self._headers = status, headers
        connection = headers.get("connection", "").lower()
        self._keep_alive = (
            "keep-alive" in connection if parts[0] == "HTTP/1.0" else "close" not in connection
        )
        if self.head_only or status in (204, 304):
            self._complete()
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise HttpProtocolError("bad Content-Length") from None
            if not 0 <= self._left <= MAX_BODY_BYTES:
                raise HttpProtocolError(f"bad Content-Length {self._left}")
            self._state = _LENGTH
        else:
            self._keep_alive = False
            self._state = _UNTIL_CLOSE


class HttpOrigin:
    """Keep-alive HTTP/1.1 connections to one origin (scheme, host, port).

    `request` sends one request and returns the response, or raises `HttpConnectError`,
    `HttpTimeout` or `HttpProtocolError`. `timeout_s` is one deadline for the whole
    exchange. A reused keep-alive connection that turns out to be closed before any byte
    of the answer arrived is replaced once, transparently (the server never saw the
    request). Connections are opened on demand; at most `max_idle` are kept.
    """

    def __init__(self, url: str, *, max_idle: int = 512, user_agent: str = "trajforge") -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if parts.scheme == "https" else None
        )
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self._fixed = f"Host: {host_header}\r\nUser-Agent: {user_agent}\r\n"
        self.max_idle = max_idle
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self.connections_opened = 0

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> HttpResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        head = [f"{method} {self.prefix}{path} HTTP/1.1\r\n", self._fixed]
        for k, v in (headers or {}).items():
            head.append(f"{k}: {v}\r\n")
        head.append(f"Content-Length: {len(body or b'')}\r\n\r\n")
        data = "".join(head).encode("latin-1") + (body or b"")
        for _ in range(2):
            conn, reused = await self._acquire(deadline, loop)
            try:
                response = await self._exchange(conn, data, method == "HEAD", deadline, loop)
            except HttpProtocolError as e:
                self._busy.discard(conn)
                if reused and not e.started:
                    continue  # a stale keep-alive connection: try once on a fresh one
                raise
            except BaseException:
                self._busy.discard(conn)
                conn.abort()
                raise
            self._release(conn)
            return response
        raise HttpProtocolError("connection closed before the response started", started=False)

    async def _exchange(
        self,
        conn: _Connection,
        data: bytes,
        head_only: bool,
        deadline: float,
        loop: asyncio.AbstractEventLoop,
    ) -> HttpResponse:
        future: asyncio.Future[HttpResponse] = loop.create_future()
        conn.begin(future, head_only)
        assert conn.transport is not None
        conn.transport.write(data)
        timer = loop.call_at(deadline, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()

    async def _acquire(
        self, deadline: float, loop: asyncio.AbstractEventLoop
    ) -> tuple[_Connection, bool]:
        """An idle connection (and True) or a new one (and False)."""
        while self._idle:
            conn = self._idle.pop()
            transport = conn.transport
            if conn.reusable and not conn.closed and transport and not transport.is_closing():
                self._busy.add(conn)
                return conn, True
            conn.abort()
        left = deadline - loop.time()
        if left <= 0:
            raise HttpTimeout("deadline passed before connecting")
        try:
            async with asyncio.timeout(left):
                _, conn = await loop.create_connection(
                    _Connection,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                )
        except TimeoutError:
            raise HttpTimeout(f"connecting to {self.host}:{self.port} timed out") from None
        except (OSError, ssl.SSLError) as e:
            raise HttpConnectError(f"{type(e).__name__}: {e}") from e
        self.connections_opened += 1
        self._busy.add(conn)
        return conn, False

    def _release(self, conn: _Connection) -> None:
        self._busy.discard(conn)
        if conn.reusable and not conn.closed and len(self._idle) < self.max_idle:
            self._idle.append(conn)
        elif not conn.closed:
            conn.abort()

    async def aclose(self) -> None:
        """Close every connection (requests still in flight fail)."""
        for conn in [*self._idle, *self._busy]:
            with contextlib.suppress(Exception):
                conn.abort()
        self._idle.clear()
        self._busy.clear()
        await asyncio.sleep(0)  # let the transports finish closing


def _expire(future: asyncio.Future[HttpResponse]) -> None:
    if not future.done():
        future.set_exception(HttpTimeout("no complete response before the deadline"))
