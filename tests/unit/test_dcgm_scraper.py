"""The DCGM scraper's failure handling, driven through httpx.MockTransport (no sockets at all)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from activities.adapters.dcgm import DcgmScrapeError, DcgmScraper
from goodput.detect.gpu import GpuProbe

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "gpu-node17.metrics"
URL = "http://gpu-node17:9400/metrics"
Handler = Callable[[httpx.Request], httpx.Response]


_clients: list[httpx.AsyncClient] = []


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    yield
    while _clients:
        await _clients.pop().aclose()


def scraper(handler: Handler, **kwargs: object) -> DcgmScraper:
    """An injected client is the caller's to close (the fixture does)."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    _clients.append(client)
    return DcgmScraper(URL, client=client, **kwargs)  # type: ignore[arg-type]


async def scrape_error(handler: Handler, **kwargs: object) -> DcgmScrapeError:
    with pytest.raises(DcgmScrapeError) as caught:
        await scraper(handler, **kwargs).scrape()
    assert URL in str(caught.value)
    return caught.value


def raises(exc: type[httpx.HTTPError]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc("simulated", request=request)  # type: ignore[call-arg]
    return handler


@pytest.mark.parametrize("exc", [httpx.ReadTimeout, httpx.ConnectTimeout, httpx.PoolTimeout])
async def test_timeouts_are_retryable(exc: type[httpx.HTTPError]) -> None:
    err = await scrape_error(raises(exc), timeout_s=0.5)
    assert err.retryable and "timed out after 0.5s" in str(err)


async def test_connection_refused_is_retryable() -> None:
    err = await scrape_error(raises(httpx.ConnectError))
    assert err.retryable and "ConnectError" in str(err)


@pytest.mark.parametrize(("status", "retryable"), [(500, True), (503, True), (429, True),
                                                   (404, False), (401, False)])
async def test_http_errors(status: int, retryable: bool) -> None:
    err = await scrape_error(lambda request: httpx.Response(status, text="nope"))
    assert err.retryable is retryable and f"HTTP {status}" in str(err)


@pytest.mark.parametrize("body", [b"<html><body>Please log in</body></html>", b"\xff\xfe\x00\x01 junk 1 2 3",
                                  b'DCGM_FI_DEV_GPU_UTIL{gpu="0" 97'])
async def test_garbage_body_is_a_clear_permanent_error(body: bytes) -> None:
    err = await scrape_error(lambda request: httpx.Response(200, content=body))
    assert not err.retryable and "not a Prometheus text exposition (line 1:" in str(err)


@pytest.mark.parametrize("body", [b"", b"# nothing here\nnode_load1 0.25\n"])
async def test_a_page_without_gpus_is_not_silently_empty(body: bytes) -> None:
    err = await scrape_error(lambda request: httpx.Response(200, content=body))
    assert not err.retryable and "no DCGM_FI_* GPU metrics" in str(err)


async def test_oversized_body_is_refused() -> None:
    err = await scrape_error(lambda request: httpx.Response(200, content=b"x" * 5000), max_bytes=1000)
    assert not err.retryable and "larger than 1000 bytes" in str(err)


async def test_xid_changes_between_scrapes_become_events() -> None:
    page = FIXTURE.read_text()
    pages = [page, page, page, page.replace("} 79\n", "} 94\n"), page]
    probe = scraper(lambda request: httpx.Response(200, text=pages.pop(0)), node="gpu-node17")
    assert isinstance(probe, GpuProbe)
    async with probe:
        assert len(await probe.sample()) == 8  # the first sight of Xid 79 is queued
        [first] = await probe.poll_xid_events(0)
        assert (first.code, first.gpu_index, first.source) == (79, 5, "dcgm")
        assert await probe.poll_xid_events(0) == []  # still 79: nothing new
        assert [e.code for e in await probe.poll_xid_events(0)] == [94]
        assert [e.code for e in await probe.poll_xid_events(0)] == [79]


async def test_existing_xids_can_be_ignored_on_the_first_scrape() -> None:
    page = FIXTURE.read_text()
    probe = scraper(lambda request: httpx.Response(200, text=page), report_existing=False)
    async with probe:
        assert await probe.poll_xid_events(0) == []
