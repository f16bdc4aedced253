"""The live incident stream keeps checking who is listening: a logout (or an expired, revoked or
demoted session) ends it, and each user holds a bounded number of streams at once. Runs the real
console app and server on loopback against a stand-in backend (no Temporal needed: the stream's
rules are about sessions, not incidents)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from goodput.config import ConsoleSettings
from goodput.console.auth import ConsoleUser, TokenAuthenticator
from goodput.console.filters import IncidentFilter
from goodput.recover.policy import Policy
from workers.console.backend import Page
from workers.console.context import ConsoleContext
from workers.console.server import Served, serve_console

pytestmark = pytest.mark.timeout(120)
OLGA = "operator-token-" + "o" * 20
VERA = "viewer-token-" + "v" * 20
USERS = (ConsoleUser(name="olga", role="operator", token=OLGA), ConsoleUser(name="vera", role="viewer", token=VERA))
EVENT_STREAM = {"accept": "text/event-stream"}


class QuietBackend:
    """No incidents, ever: every stream sends its first (empty) list, then keep-alives."""

    async def page(self, flt: IncidentFilter, token: bytes | None = None) -> Page:
        return Page(rows=(), next_token=None)

    async def counts(self, flt: IncidentFilter) -> dict[str, int]:
        return {}


@asynccontextmanager
async def console(tmp_path: Path, max_streams: int = 4, users: tuple[ConsoleUser, ...] = USERS,
                  token_file: Path | None = None) -> AsyncIterator[tuple[str, ConsoleContext, Served]]:
    ctx = ConsoleContext(backend=QuietBackend(), auth=TokenAuthenticator(users, b"s" * 32),  # type: ignore[arg-type]
                         policy=Policy(), cluster="c1", audit_path=tmp_path / "audit.jsonl",
                         temporal_ui_url="http://127.0.0.1:8233", namespace="default", refresh_s=0.05,
                         max_streams_per_user=max_streams)
    async with serve_console(ctx, ConsoleSettings(port=0), token_file) as served:
        yield served.url, ctx, served


async def first_event(lines: AsyncIterator[str]) -> None:
    async for line in lines:
        if line.startswith("event: incidents"):
            return
    raise AssertionError("the stream ended before its first event")


async def test_logging_out_ends_the_live_stream(tmp_path: Path) -> None:
    async with console(tmp_path) as (url, ctx, _served), httpx.AsyncClient(base_url=url, timeout=30) as http:
        response = await http.post("/login", data={"token": OLGA, "next": "/incidents"})
        assert response.status_code == 303
        cookie = http.cookies["goodput_session"]
        async with httpx.AsyncClient(base_url=url, timeout=30, cookies={"goodput_session": cookie}) as browser, \
                browser.stream("GET", "/incidents/stream", headers=EVENT_STREAM) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            await first_event(lines)
            principal = ctx.auth.from_session(cookie, datetime.now(UTC))
            assert principal is not None
            out = await http.post("/logout", data={"csrf_token": ctx.auth.csrf_token(principal)})
            assert out.status_code == 303
            rest = [line async for line in lines]  # returns only when the server ends the stream
            assert "event: ended" in rest
            again = await browser.get("/incidents/stream")
        assert again.status_code == 401  # the cookie is dead here, not only in the browser that dropped it


async def test_each_user_holds_a_bounded_number_of_streams(tmp_path: Path) -> None:
    async with console(tmp_path, max_streams=2) as (url, _ctx, _served), \
            httpx.AsyncClient(base_url=url, timeout=30) as http:
        olga = {**EVENT_STREAM, "authorization": f"Bearer {OLGA}"}
        async with http.stream("GET", "/incidents/stream", headers=olga) as one, \
                http.stream("GET", "/incidents/stream", headers=olga) as two:
            await first_event(one.aiter_lines())
            await first_event(two.aiter_lines())
            refused = await http.get("/incidents/stream", headers=olga)
            assert refused.status_code == 429 and re.search(r"olga already has 2 live streams", refused.text)
            async with http.stream("GET", "/incidents/stream",
                                   headers={**EVENT_STREAM, "authorization": f"Bearer {VERA}"}) as other:
                assert other.status_code == 200  # the bound is per user
        # Closed streams give their places back (once the server has seen them go).
        while True:
            async with http.stream("GET", "/incidents/stream", headers=olga) as retry:
                if retry.status_code == 200:
                    await first_event(retry.aiter_lines())
                    break
                assert retry.status_code == 429


LINK_PATH = "/login/once"


async def test_a_login_link_logs_in_once_and_never_reaches_the_logs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, uvicorn's access and error logs included
    admin = ConsoleUser(name="admin", role="admin", token="admin-token-" + "a" * 20)
    async with console(tmp_path, users=(*USERS, admin), token_file=tmp_path / "admin.token") as (url, ctx, served), \
            httpx.AsyncClient(base_url=url, timeout=30) as http:
        # uvicorn's own loggers do not propagate: listen to them directly, at every level.
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).setLevel(logging.DEBUG)
            logging.getLogger(name).addHandler(caplog.handler)
        assert served.login_url is not None and served.login_url.startswith(f"{url}{LINK_PATH}?token=")
        token = served.login_url.split("token=", 1)[1]
        first = await http.get(served.login_url)
        # Exchanged for the session cookie, then sent to a URL without the token, with no Referer.
        assert first.status_code == 303 and first.headers["location"] == "/incidents"
        assert token not in first.headers["location"]
        assert first.headers["referrer-policy"] == "no-referrer"
        cookie = first.cookies["goodput_session"]
        principal = ctx.auth.from_session(cookie, datetime.now(UTC))
        assert principal is not None and principal.name == "admin"
        page = await http.get("/incidents")
        assert page.status_code == 200
        async with httpx.AsyncClient(base_url=url, timeout=30) as stranger:
            again = await stranger.get(served.login_url)  # single use: a copied link is worthless
            assert again.status_code == 401 and "goodput_session" not in again.cookies
            assert again.headers["referrer-policy"] == "no-referrer"
            forged = await stranger.get(f"{LINK_PATH}?token={token[:-2]}xx")
            assert forged.status_code == 401 and "goodput_session" not in forged.cookies
            odd = await stranger.get(LINK_PATH, params={"token": "\u00e9" * 5000})
            assert odd.status_code == 401
            missing = await stranger.get(LINK_PATH)
            assert missing.status_code == 401
            stale = ctx.login_links.issue(admin, datetime.now(UTC) - timedelta(minutes=11))
            expired = await stranger.get(f"{LINK_PATH}?token={stale}")
            assert expired.status_code == 401 and "goodput_session" not in expired.cookies
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).removeHandler(caplog.handler)
    # The test's own client (httpx, httpcore) logs the URLs it fetches; everything else is the console's.
    served_side = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    logged = "\n".join(f"{r.getMessage()} {r.args}" for r in served_side)
    assert caplog.records, "the capture saw nothing: the check below would prove nothing"
    assert token not in logged and stale not in logged


async def test_stopping_the_console_ends_its_open_streams(tmp_path: Path) -> None:
    """uvicorn waits for open connections before it stops: a live stream must end on its own."""
    olga = {**EVENT_STREAM, "authorization": f"Bearer {OLGA}"}
    served = console(tmp_path)
    url, _ctx, _served = await served.__aenter__()
    stopping: asyncio.Task[bool | None] | None = None
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http, contextlib.AsyncExitStack() as held:
            streams = [await held.enter_async_context(http.stream("GET", "/incidents/stream", headers=olga))
                       for _ in range(3)]
            lines = [s.aiter_lines() for s in streams]
            for each in lines:
                await first_event(each)
            stopping = asyncio.create_task(served.__aexit__(None, None, None))
            rests = [[line async for line in each] for each in lines]  # each returns once its stream ends
            # A liveness bound, not a speed claim: before the fix the console never stopped.
            await asyncio.wait_for(stopping, timeout=60)
    finally:
        if stopping is None:
            await served.__aexit__(None, None, None)
    assert all("event: closing" in rest for rest in rests), rests
