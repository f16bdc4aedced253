"""The agent's one poster: every failure counted, each distinct failure logged once, the recovery once."""

from __future__ import annotations

import logging

import httpx
import pytest

from activities.adapters.heartbeat import AgentPoster

pytestmark = pytest.mark.timeout(10)


async def test_failures_are_counted_logged_once_each_and_the_recovery_once(caplog: pytest.LogCaptureFixture) -> None:
    answers = iter([503, 503, 503, 401, 200, 200, 503])
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(next(answers), json={"ok": True})

    poster = AgentPoster("http://127.0.0.1:1/", "/v1/x", "tok", what="x report")
    caplog.set_level(logging.INFO, logger="goodput.agent")
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as session:
        results = [await poster.post(session, {"n": i}) for i in range(7)]

    assert [r is not None for r in results] == [False, False, False, False, True, True, False]
    assert poster.errors == 5 and poster.sent == 2 and poster.last_status == 503
    assert seen[0].url == "http://127.0.0.1:1/v1/x" and seen[0].headers["Authorization"] == "Bearer tok"
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "goodput.agent"]  # not httpx's
    warned = [m for level, m in lines if level == logging.WARNING]
    # The same 503 three times is one line; a different error is another; after the recovery the
    # same 503 is news again.
    assert len(warned) == 3 and "HTTP 503" in warned[0] and "HTTP 401" in warned[1] and "HTTP 503" in warned[2]
    assert [m for level, m in lines if level == logging.INFO] == ["x reports to http://127.0.0.1:1/v1/x work again"]


async def test_a_transport_error_has_no_status() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    poster = AgentPoster("http://127.0.0.1:1", "/v1/x", "tok", what="x report")
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as session:
        assert await poster.post(session, {}) is None
    assert poster.errors == 1 and poster.last_status is None
