"""The live incident stream keeps checking who is listening: a logout (or an expired, revoked or
demoted session) ends it, and each user holds a bounded number of streams at once. Runs the real
console app and server on loopback against a stand-in backend (no Temporal needed: the stream's
rules are about sessions, not incidents)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from goodput.config import ConsoleSettings
from goodput.console.auth import ConsoleUser, TokenAuthenticator
from goodput.console.filters import IncidentFilter
from goodput.recover.policy import Policy
from workers.console.backend import Page
from workers.console.context import ConsoleContext
from workers.console.server import serve_console

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
async def console(tmp_path: Path, max_streams: int = 4) -> AsyncIterator[tuple[str, ConsoleContext]]:
    ctx = ConsoleContext(backend=QuietBackend(), auth=TokenAuthenticator(USERS, b"s" * 32),  # type: ignore[arg-type]
                         policy=Policy(), cluster="c1", audit_path=tmp_path / "audit.jsonl",
                         temporal_ui_url="http://127.0.0.1:8233", namespace="default", refresh_s=0.05,
                         max_streams_per_user=max_streams)
    async with serve_console(ctx, ConsoleSettings(port=0), None) as served:
        yield served.url, ctx


async def first_event(lines: AsyncIterator[str]) -> None:
    async for line in lines:
        if line.startswith("event: incidents"):
            return
    raise AssertionError("the stream ended before its first event")


async def test_logging_out_ends_the_live_stream(tmp_path: Path) -> None:
    async with console(tmp_path) as (url, ctx), httpx.AsyncClient(base_url=url, timeout=30) as http:
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
    async with console(tmp_path, max_streams=2) as (url, _ctx), httpx.AsyncClient(base_url=url, timeout=30) as http:
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
