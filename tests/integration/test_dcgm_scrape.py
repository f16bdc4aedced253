"""The real scraper against a real HTTP server on 127.0.0.1 serving a recorded-style DCGM page."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from activities.adapters.dcgm import DcgmScrapeError, DcgmScraper
from goodput.detect.gpu import Severity
from goodput.detect.gpu_rules import evaluate

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "gpu-node17.metrics"
PAGE = FIXTURE.read_bytes()
RELEASE = threading.Event()  # lets /slow finish as soon as the test is done with it


class Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._reply(200, PAGE, "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/slow":
            RELEASE.wait(10)
            self._reply(200, PAGE, "text/plain")
        elif self.path == "/error":
            self._reply(500, b"dcgm: failed to read fields\n", "text/plain")
        elif self.path == "/login":
            self._reply(200, b"<!DOCTYPE html><html><body>Sign in</body></html>\n", "text/html")
        else:
            self._reply(404, b"not found\n", "text/plain")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the timeout test gave up
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def exporter() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="fake-dcgm-exporter", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        RELEASE.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.timeout(20)
async def test_scrape_a_real_endpoint(exporter: str) -> None:
    async with DcgmScraper(f"{exporter}/metrics", timeout_s=5) as probe:
        samples = await probe.sample()
        assert [s.index for s in samples] == list(range(8))
        assert {s.node for s in samples} == {"gpu-node17"} and samples[0].job_ids == ("4242",)
        [xid] = await probe.poll_xid_events(0)
        assert (xid.code, xid.gpu_index, xid.pci_bus_id) == (79, 5, "0000:ab:00.0")
        assert await probe.poll_xid_events(0) == []
    critical = {(f.gpu_index, f.rule) for f in evaluate(samples) if f.severity is Severity.CRITICAL}
    assert critical == {(5, "xid-79"), (5, "ecc-uncorrectable")}


@pytest.mark.timeout(20)
async def test_a_hanging_exporter_times_out(exporter: str) -> None:
    async with DcgmScraper(f"{exporter}/slow", timeout_s=0.3) as probe:
        with pytest.raises(DcgmScrapeError, match=r"timed out after 0.3s") as caught:
            await probe.scrape()
    assert caught.value.retryable


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("path", "retryable", "message"), [
    ("/error", True, "HTTP 500"), ("/nope", False, "HTTP 404"),
    ("/login", False, "not a Prometheus text exposition")])
async def test_bad_answers(exporter: str, path: str, retryable: bool, message: str) -> None:
    async with DcgmScraper(f"{exporter}{path}", timeout_s=5) as probe:
        with pytest.raises(DcgmScrapeError, match=message) as caught:
            await probe.scrape()
    assert caught.value.retryable is retryable


@pytest.mark.timeout(20)
async def test_nobody_listening(exporter: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free once closed: nothing listens there
    async with DcgmScraper(f"http://127.0.0.1:{port}/metrics", timeout_s=5) as probe:
        with pytest.raises(DcgmScrapeError, match="ConnectError") as caught:
            await probe.scrape()
    assert caught.value.retryable
