"""`goodput console` alone (its workers elsewhere): its /metrics, the chart's readiness probe,
answers 200 with goodput's series from start-up, never 503 "not set up"."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from tests.cli.test_cli import GOODPUT, cli_env  # noqa: F401 -- the fixture, shared
from tests.helpers import free_port, wait_until

pytestmark = pytest.mark.temporal


def test_the_console_serves_its_metrics_from_start_up(cli_env: dict[str, str]) -> None:  # noqa: F811
    port = free_port()
    env = {**cli_env, "GOODPUT_CONSOLE__PORT": str(port)}
    proc = subprocess.Popen([*GOODPUT, "console"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        def scrape() -> httpx.Response | None:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
            except httpx.TransportError:
                return None
        answer = wait_until(scrape, lambda r: r is not None, timeout=90, what="the console's /metrics")
        assert answer is not None and answer.status_code == 200, answer.text if answer is not None else ""
        assert 'goodput_anomalies_total{kind="crash",source="log"} 0.0' in answer.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()
