"""The limits every goodput endpoint shares (workers/http_site.py), spoken to over a raw socket: what
an HTTP client library would never send (a body that does not end, a head a byte at a time)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from goodput.detect.push import PushConfig
from tests.fakes.sink import RecordingSink
from workers import http_site
from workers.push import PushServer, serve_push

pytestmark = pytest.mark.timeout(60)
TOKEN = "integration-token-0123456789"
LIMIT = 64 << 10


@pytest_asyncio.fixture
async def server() -> AsyncIterator[PushServer]:
    config = PushConfig(enabled=True, port=0, tokens=(TOKEN,), max_body_bytes=LIMIT)
    async with serve_push(config, RecordingSink(), "lab") as running:
        yield running


def head(extra: str) -> bytes:
    return (f"POST /v1/logs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/x-ndjson\r\n{extra}\r\n").encode()


@contextlib.asynccontextmanager
async def connect(server: PushServer) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, object]]:
    status_line = await reader.readline()
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), json.loads(body)


async def test_a_chunked_body_past_the_limit_is_413_before_it_ends(server: PushServer) -> None:
    """The body never ends: the answer can only come from a server that stopped at the limit."""
    async with connect(server) as (reader, writer):
        writer.write(head("Transfer-Encoding: chunked\r\n"))
        chunk = b'{"log": "' + b"y" * 4000 + b'", "job_id": "1"}\n'
        for _ in range(2 * LIMIT // len(chunk)):  # twice the limit, and no terminating chunk
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await writer.drain()
        status, body = await asyncio.wait_for(answer(reader), 30)
    assert status == 413 and str(LIMIT) in str(body["error"])


async def test_a_head_sent_a_byte_at_a_time_is_cut_off(server: PushServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_site, "HEADER_TIMEOUT_S", 0.5, raising=False)
    trickle = head("X-Slow: " + "a" * 200 + "\r\n")  # at 20 bytes a second: 20 s, 40 times the deadline
    sent = 0
    async with connect(server) as (reader, writer):
        with pytest.raises((ConnectionError, EOFError)):
            for byte in trickle:
                writer.write(bytes([byte]))
                await writer.drain()
                sent += 1
                try:  # the pace of the trickle; the server closing ends it early
                    if await asyncio.wait_for(reader.read(1), 0.05) == b"":
                        raise EOFError
                except TimeoutError:
                    continue
    assert sent < len(trickle)


async def test_a_body_that_stalls_is_408(server: PushServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_site, "BODY_TIMEOUT_S", 0.5, raising=False)
    async with connect(server) as (reader, writer):
        writer.write(head("Content-Length: 1000\r\n") + b'{"log": "')  # and nothing more
        await writer.drain()
        status, body = await asyncio.wait_for(answer(reader), 30)
    assert status == 408 and "did not arrive" in str(body["error"])


async def test_requests_past_the_in_flight_cap_are_503_in_the_json_shape() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def hold(request: Request) -> JSONResponse:
        entered.set()
        await release.wait()
        return JSONResponse({"held": True})

    app = http_site.application([Route("/hold", hold)], max_in_flight=1)
    listener = http_site.Listener(app, "test", "127.0.0.1", 0)
    await listener.start()
    try:
        async with httpx.AsyncClient(base_url=listener.url, timeout=30) as client:
            first = asyncio.create_task(client.get("/hold"))
            await entered.wait()
            busy = await client.get("/healthz")
            release.set()
            assert (await first).status_code == 200
    finally:
        await listener.stop()
    assert busy.status_code == 503 and busy.headers["Retry-After"] == "5" and "in flight" in busy.json()["error"]
    assert busy.headers["Server"] == "goodput"


async def test_a_head_over_the_limit_is_refused(server: PushServer) -> None:
    async with connect(server) as (reader, writer):
        writer.write(head("X-Big: " + "b" * (http_site.MAX_HEADER_BYTES + 1) + "\r\n"))
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 30)
    assert status_line.split()[1] in (b"400", b"431")  # aiohttp said 400, h11 and the guard 431
