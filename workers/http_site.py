"""The one HTTP server stack (Starlette on uvicorn) goodput's small endpoints share: the log push
server, the heartbeat endpoint and NVSentinel's CloudEvents receiver, beside the console.

Each of them is reachable by any local user (or a loopback peer), so the limits live here once:
every refusal in one JSON shape (`{"error": ...}`, the framework's 404/405 included), a plain
`Server: goodput` (no versions), a `/healthz`, and a listener that binds its own socket (a taken
port is an OSError here, not uvicorn's exit of the process). Against holding the server hostage:
the request head must arrive within `HEADER_TIMEOUT_S` and fit `MAX_HEADER_BYTES` (each line
`MAX_LINE_BYTES`), a body must arrive within `BODY_TIMEOUT_S` of its first read (uvicorn
has no such timeout, so the ASGI layer keeps one), a body is read only through `read_body`, which
stops at its limit (after gzip or deflate decoding, chunked or not) before reading further, at
most `MAX_IN_FLIGHT` requests are handled at once (503 with Retry-After beyond), and an idle
keep-alive connection closes after `KEEP_ALIVE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import h11
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

HEALTH_PATH = "/healthz"
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
MAX_HEADER_BYTES = 16 << 10
MAX_LINE_BYTES = 8190  # aiohttp's limit on the request line and on each header line
MAX_IN_FLIGHT = 256
MAX_CONNECTIONS = 1024  # uvicorn answers 503 itself beyond this (idle keep-alive connections count)
KEEP_ALIVE_S = 75.0
LINGER_S = 10.0  # as aiohttp's lingering close: the client still sending reads its 413, not a reset
SHUTDOWN_S = 5.0
RETRY_AFTER_S = 5
_KEPT_HEADERS = ("Allow", "WWW-Authenticate", "Retry-After")
_CLOSING = (408, 413, 414, 431)  # the rest of the body is never read: the connection cannot carry another request


def bracketed(host: str) -> str:
    """A host as it goes into a URL (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def json_error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    kept = dict(headers or {})
    if status in _CLOSING:
        kept["Connection"] = "close"
    return JSONResponse({"error": message}, status_code=status, headers=kept)


def content_type(request: Request) -> str:
    """The media type alone, lower case (`application/octet-stream` when none is sent)."""
    value = request.headers.get("Content-Type", "").partition(";")[0].strip().lower()
    return value or "application/octet-stream"


def content_length(request: Request) -> int | None:
    """The declared length (h11 has already refused a malformed one), None for a chunked body."""
    value = request.headers.get("Content-Length")
    return int(value) if value is not None and value.isdigit() else None


def _decoder(request: Request) -> Any:
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib framing, told by the header bytes
    raise HTTPException(415, f"unsupported content encoding {encoding[:40]!r}; send gzip, deflate or none")


def _too_large(limit: int) -> HTTPException:
    return HTTPException(413, f"body is over {limit} bytes (limit {limit})")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, decoded, or 413 as soon as it (or what it inflates to) passes `limit`: nothing past
    the chunk that crossed it is read, whatever the Content-Length said or whether there was one."""
    decoder = _decoder(request)
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        if decoder is not None and chunk:
            chunk = decoder.decompress(chunk, limit - size + 1)  # a bomb inflates one byte past the room
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        parts.append(chunk)
    if decoder is not None:
        if not decoder.eof:
            raise HTTPException(400, "the compressed body is truncated or not gzip/deflate")
        tail = decoder.flush()
        if size + len(tail) > limit:
            raise _too_large(limit)
        parts.append(tail)
    return b"".join(parts)


def _oversized_head(scope: Scope) -> Response | None:
    """h11 bounds only a head still arriving (`MAX_HEADER_BYTES`); one that came in a single read
    is measured here, by aiohttp's limits: each line, and the whole."""
    if len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) > MAX_LINE_BYTES:
        return json_error(414, f"the request line is over {MAX_LINE_BYTES} bytes")
    lines = [len(name) + len(value) + 2 for name, value in scope["headers"]]
    if any(n > MAX_LINE_BYTES for n in lines) or sum(lines) > MAX_HEADER_BYTES:
        return json_error(431, f"a header line is over {MAX_LINE_BYTES} bytes or all are over {MAX_HEADER_BYTES}")
    return None


class _Guard:
    """Outermost ASGI layer: the in-flight cap, the body deadline and the Server header."""

    def __init__(self, app: ASGIApp, max_in_flight: int) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def plain_server(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"server"]
                message["headers"].append((b"server", b"goodput"))  # not the Python and uvicorn versions
            await send(message)

        refusal = _oversized_head(scope)
        if refusal is None and self.in_flight >= self.max_in_flight:
            refusal = json_error(503, "too many requests in flight; retry later", {"Retry-After": str(RETRY_AFTER_S)})
        if refusal is not None:
            await refusal(scope, receive, plain_server)
            return
        deadline: float | None = None
        body_done = False

        async def bounded_receive() -> Message:
            nonlocal deadline, body_done
            if body_done:  # waiting for the client to go (a stream's disconnect) is not reading a body
                return await receive()
            deadline = deadline if deadline is not None else asyncio.get_running_loop().time() + BODY_TIMEOUT_S
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408, f"the body did not arrive within {BODY_TIMEOUT_S:g} s") from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        self.in_flight += 1
        try:
            await self.app(scope, bounded_receive, plain_server)
        finally:
            self.in_flight -= 1


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = {k: v for k, v in (exc.headers or {}).items() if k in _KEPT_HEADERS}
    return json_error(exc.status_code, exc.detail, headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return json_error(500, "internal error")  # the traceback goes to the log (uvicorn's), never to the peer


async def _health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def application(routes: Sequence[BaseRoute], *, max_in_flight: int = MAX_IN_FLIGHT) -> ASGIApp:
    """`routes` and `/healthz`, with the shared error shape, server header and limits."""
    app = Starlette(routes=[*routes, Route(HEALTH_PATH, _health, methods=["GET"])],
                    exception_handlers={HTTPException: _http_error, Exception: _internal_error})
    return _Guard(app, max_in_flight)


class _Lingering:
    """The connection's transport, except that closing it while the client is still sending a body
    (after a 413 or 408) sends the answer and a FIN, then discards what still comes for LINGER_S:
    closing a socket with unread data resets it, and the client would lose the answer."""

    def __init__(self, transport: asyncio.Transport, protocol: _GuardedH11) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        transport = self._transport
        if self.lingering or transport.is_closing():
            return
        if self._protocol.conn.their_state is not h11.SEND_BODY or not transport.can_write_eof():
            transport.close()
            return
        self.lingering = True
        transport.write_eof()
        transport.resume_reading()  # uvicorn's flow control may have paused it mid-body
        self._protocol.loop.call_later(LINGER_S, transport.close)

    def finish(self) -> None:
        self._transport.close()


class _GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline on the request head (uvicorn times out only an idle
    keep-alive connection, so a client sending a header a byte a second held its slot forever) and
    aiohttp's lingering close."""

    _head_deadline: asyncio.TimerHandle | None = None
    _lingering: _Lingering | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._lingering = _Lingering(transport, self)
        super().connection_made(self._lingering)  # type: ignore[arg-type]
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._lingering is not None and self._lingering.lingering:
            return  # the rest of a refused body: discarded
        if self.conn.their_state is h11.IDLE:
            self._arm()  # the first bytes of a request on a kept-alive connection start its clock
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()

    def eof_received(self) -> None:
        if self._lingering is not None and self._lingering.lingering:
            self._lingering.finish()

    def shutdown(self) -> None:
        if self._lingering is not None and self._lingering.lingering:
            self._lingering.finish()  # stopping does not wait out a refused body
            return
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


class _Server(uvicorn.Server):
    """uvicorn would take over SIGINT/SIGTERM; the service owns them and stops us itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.create_server(address, family=family, reuse_port=False)
    sock.setblocking(False)
    return sock


class Listener:
    """One app on one host and port (0 picks a free one), started and stopped once each: the
    port, URL, start and stop every endpoint (push, heartbeats, NVSentinel's receiver) shares."""

    def __init__(self, app: ASGIApp, what: str, host: str, port: int) -> None:
        self._app = app
        self._what = what
        self._host = host
        self._wanted_port = port
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"the {self._what} is not started")
        return self._port

    @property
    def url(self) -> str:
        """`http://host:port` (IPv6 in brackets), once started."""
        return f"http://{bracketed(self._host)}:{self.port}"

    @property
    def started(self) -> bool:
        return self._server is not None

    async def start(self) -> bool:
        """Binds and serves; False when it already was (start is idempotent)."""
        if self._server is not None:
            return False
        sock = _bind(self._host, self._wanted_port)  # a port already taken raises here, nothing left open
        config = uvicorn.Config(self._app, http=_GuardedH11, lifespan="off", log_config=None, log_level="warning",
                                access_log=False, proxy_headers=False,
                                server_header=False, h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                                limit_concurrency=MAX_CONNECTIONS, timeout_keep_alive=int(KEEP_ALIVE_S),
                                timeout_graceful_shutdown=int(SHUTDOWN_S))
        server = _Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError(f"the {self._what} did not start on {self._host}:{self._wanted_port}")
                await asyncio.sleep(0.01)
        except BaseException:
            server.should_exit = True
            with contextlib.suppress(BaseException):
                await task
            sock.close()
            raise
        self._server, self._task = server, task
        self._port = int(sock.getsockname()[1])
        return True

    async def stop(self) -> None:
        server, task, self._server, self._task = self._server, self._task, None, None
        if server is not None and task is not None:
            server.should_exit = True
            await task
        self._port = None
