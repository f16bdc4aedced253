"""What the metrics tests share: `/metrics` served by uvicorn as the console serves it, a real
Prometheus scraping it, PromQL asked over its HTTP API, and an exposition parsed strictly.

Without /usr/bin/prometheus the tests that need it skip, saying so; with GOODPUT_REQUIRE_SLURM=1
(CI, which installs it with scripts/install-console-tools.sh) they fail instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from starlette.applications import Starlette
from starlette.routing import Route

from tests.helpers import free_port
from tests.required import unavailable
from workers.metrics_endpoint import metrics_endpoint

PROMETHEUS = Path("/usr/bin/prometheus")


@contextlib.asynccontextmanager
async def serve_metrics() -> AsyncIterator[str]:
    """`metrics_endpoint` served by uvicorn on 127.0.0.1, as the console mounts it; its URL."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    app = Starlette(routes=[Route("/metrics", metrics_endpoint)])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", ws="none"))
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        for _ in range(200):
            if server.started or task.done():
                break
            await asyncio.sleep(0.05)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        listener.close()


def prometheus_or_skip() -> Path:
    if PROMETHEUS.is_file() and os.access(PROMETHEUS, os.X_OK):
        return PROMETHEUS
    message = f"{PROMETHEUS} is not installed (scripts/install-console-tools.sh installs Debian's prometheus)"
    unavailable(message)


@contextlib.contextmanager
def prometheus(binary: Path, workdir: Path, target: str) -> Iterator[str]:
    """A real Prometheus scraping `target` every second; stopped (and reaped) whatever happens."""
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                      "scrape_configs:\n  - job_name: goodput\n    metrics_path: /metrics\n"
                      f"    static_configs:\n      - targets: ['{target}']\n")
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [str(binary), f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()


async def ask(client: httpx.AsyncClient, api: str, promql: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """Prometheus's answer to an instant query once it has data for it (an error answer at once:
    a query that does not parse never will); the last empty success when none came in time."""
    deadline = time.monotonic() + timeout_s
    last: Any = "no answer yet"
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):  # still starting
            answer = (await client.get(f"{api}/api/v1/query", params={"query": promql})).json()
            last = answer
            if answer.get("status") != "success" or answer["data"]["result"]:
                return dict(answer)
        await asyncio.sleep(0.5)
    if isinstance(last, dict):
        return last
    raise AssertionError(f"Prometheus did not answer {promql!r} within {timeout_s:.0f}s: {last}")


async def query(client: httpx.AsyncClient, api: str, promql: str, timeout_s: float = 60.0) -> float:
    """The value of an instant query, once Prometheus has scraped enough to answer it."""
    answer = await ask(client, api, promql, timeout_s)
    if answer.get("status") == "success" and answer["data"]["result"]:
        return float(answer["data"]["result"][0]["value"][1])
    raise AssertionError(f"Prometheus did not answer {promql!r} within {timeout_s:.0f}s: {answer}")


def samples(body: bytes) -> list[Sample]:
    """Every sample of an exposition, parsed strictly (a malformed body raises); a family seen twice
    is an error too, as Prometheus rejects such a scrape whole."""
    families = list(text_string_to_metric_families(body.decode()))
    names = [family.name for family in families]
    assert len(names) == len(set(names)), f"a metric family twice: {sorted(n for n in names if names.count(n) > 1)}"
    return [sample for family in families for sample in family.samples]
