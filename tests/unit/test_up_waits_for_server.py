"""`goodput up` waits for its dev server to be ready instead of failing on "Frontend is not healthy yet"."""

from __future__ import annotations

import pytest

from workers.devserver import DevServerError, NotReadyError, wait_until_ready


class Server:
    """Answers NotReady `refusals` times, then is ready; the clock advances one second a probe."""

    def __init__(self, refusals: int) -> None:
        self.refusals, self.probes, self.now = refusals, 0, 0.0

    async def probe(self) -> str:
        self.probes += 1
        self.now += 1.0
        if self.probes <= self.refusals:
            raise NotReadyError("Frontend is not healthy yet")
        return "client"


async def test_a_server_that_becomes_ready_is_waited_for_and_the_wait_said_once() -> None:
    server, said = Server(refusals=3), []
    got = await wait_until_ready(server.probe, what="the Temporal dev server at 127.0.0.1:7233", timeout_s=30,
                                 say=said.append, interval_s=0, clock=lambda: server.now)
    assert got == "client" and server.probes == 4
    assert said == ["waiting for the Temporal dev server at 127.0.0.1:7233 (Frontend is not healthy yet)…"]


async def test_a_server_that_never_becomes_ready_ends_in_one_line_with_the_reason() -> None:
    server = Server(refusals=10**6)
    with pytest.raises(DevServerError) as raised:
        await wait_until_ready(server.probe, what="the Temporal dev server", timeout_s=5, say=lambda _: None,
                               interval_s=0, clock=lambda: server.now)
    assert str(raised.value) == "the Temporal dev server was not ready within 5 s: Frontend is not healthy yet"
    assert server.probes <= 7  # bounded by the deadline, not by the refusals


async def test_other_errors_are_not_waited_out() -> None:
    async def broken() -> str:
        raise PermissionError("no such namespace permission")
    with pytest.raises(PermissionError):
        await wait_until_ready(broken, what="x", timeout_s=60, say=lambda _: None, interval_s=0)
