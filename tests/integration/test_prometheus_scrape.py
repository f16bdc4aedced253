"""goodput's metrics leave the process both ways a site collects them: Debian's real Prometheus
scrapes `/metrics` (served by uvicorn on 127.0.0.1, as the console serves it) and answers PromQL
about the detection histogram; and, with an OTLP endpoint set, metrics and traces are pushed to it
over OTLP/HTTP (a recording receiver on 127.0.0.1 stands in for the collector).

Without /usr/bin/prometheus the scrape test skips, saying so; with GOODPUT_REQUIRE_SLURM=1 (CI,
which installs it with scripts/install-console-tools.sh) it fails instead.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider

from tests.integration.metrics_harness import prometheus, prometheus_or_skip, query, serve_metrics
from workers.prometheus import Exposition
from workers.telemetry import instruments

REPO = Path(__file__).resolve().parents[2]
QUANTILE = "histogram_quantile(0.5, sum by (le) (goodput_detection_latency_seconds_bucket))"
MEAN = "sum(goodput_detection_latency_seconds_sum) / sum(goodput_detection_latency_seconds_count)"
# No proxy for loopback, whatever the environment says (requests and httpx both read these).
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@pytest.fixture
async def metrics_url(exposition: Exposition) -> AsyncIterator[str]:
    """`metrics_endpoint` served by uvicorn, as the console mounts it."""
    async with serve_metrics() as url:
        yield url


async def test_prometheus_scrapes_the_detection_histogram(exposition: Exposition, metrics_url: str,
                                                          tmp_path: Path) -> None:
    binary = prometheus_or_skip()
    latency = instruments(MeterProvider(metric_readers=[exposition.reader]).get_meter("goodput")).detection_latency
    for seconds in (0.6, 0.7, 0.7, 0.8):  # all in the (0.5, 1] bucket
        latency.record(seconds, {"source": "log", "kind": "gpu-fault"})
    latency.record(0.7, {"source": "gpu", "kind": "xid"})
    target = metrics_url.removeprefix("http://").removesuffix("/metrics")
    async with httpx.AsyncClient(timeout=5, trust_env=False) as client:
        with prometheus(binary, tmp_path, target) as api:
            median = await query(client, api, QUANTILE)
            mean = await query(client, api, MEAN)
            up = await query(client, api, 'up{job="goodput"}')
    # Prometheus interpolates inside the bucket: 0.5 + 0.5 * (2.5 of 5 observations) = 0.75.
    assert median == pytest.approx(0.75)
    assert mean == pytest.approx(0.7)
    assert up == 1.0


# -- OTLP/HTTP push --------------------------------------------------------------------------


class Receiver(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.lock:
            self.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="fake-otlp-collector", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# In its own process: setup_metrics and setup_tracing install process-wide providers, once.
PUSHER = """
import sys
from opentelemetry import trace
from workers.prometheus import published
from workers.telemetry import instruments, setup_metrics, setup_tracing

provider = setup_metrics(None, 60.0, otlp_endpoint=sys.argv[1])
tracing = setup_tracing(sys.argv[1])
instruments().detection_latency.record(0.4, {"source": "log", "kind": "gpu-fault"})
with trace.get_tracer("goodput.detect").start_as_current_span("goodput.anomaly"):
    pass
exposition = published()
assert exposition is not None and b"goodput_detection_latency_seconds_count" in exposition.render()
assert tracing is not None
tracing.shutdown()
provider.shutdown()
"""


async def test_metrics_and_traces_are_pushed_over_otlp(collector: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES and not k.startswith("OTEL_")}
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", PUSHER, collector], cwd=REPO, env=env,
                                   capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    by_path = {path: (kind, body) for path, kind, body in Receiver.received}
    assert set(by_path) == {"/v1/metrics", "/v1/traces"}, Receiver.received
    assert all(kind == "application/x-protobuf" for kind, _ in by_path.values())
    assert b"goodput.detection.latency" in by_path["/v1/metrics"][1]
    assert b"goodput.anomaly" in by_path["/v1/traces"][1]
