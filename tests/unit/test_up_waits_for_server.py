"""`goodput up` and `goodput worker` wait for a Temporal server that is starting, instead of failing
on "Frontend is not healthy yet"; any other refusal is raised at once."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from goodput.service.incidents import ServiceUnavailableError, TemporalStartingError
from workers.client import starting
from workers.devserver import DevServerError, NotReadyError, wait_until_ready
from workers.readiness import ready_client


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


@pytest.mark.parametrize(("rust_error", "waits"), [
    ('Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError('
     '"tcp connect error", Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }))', True),
    ('Failed client connect: `get_system_info` call error after connection: Status { code: Unavailable, '
     'message: "Frontend is not healthy yet", metadata: MetadataMap { headers: {} }, source: None }', True),
    ('Failed client connect: `get_system_info` call error after connection: Status { code: Unauthenticated, '
     'message: "invalid API key", metadata: MetadataMap { headers: {} }, source: None }', False),
])
def test_only_a_starting_servers_refusals_are_waited_for(rust_error: str, waits: bool) -> None:
    assert starting(rust_error) is waits


async def test_a_connect_refused_while_starting_is_not_ready_and_any_other_refusal_is_raised() -> None:
    async def refused() -> Client:
        raise TemporalStartingError("cannot reach Temporal at 127.0.0.1:1 (Frontend is not healthy yet)",
                                    reason="Frontend is not healthy yet")

    async def denied() -> Client:
        raise ServiceUnavailableError("temporal_tls.ca_file /nope: No such file or directory")

    with pytest.raises(NotReadyError) as waited:
        await ready_client(refused, "default")
    assert str(waited.value) == "Frontend is not healthy yet"  # the server's words, not the whole sentence again
    with pytest.raises(ServiceUnavailableError, match="ca_file") as raised:
        await ready_client(denied, "default")
    assert not isinstance(raised.value, NotReadyError)
