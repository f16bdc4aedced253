"""Every scrape of `/metrics` carries the full exposition: from the moment the process starts (every
counter at 0 for every known label set), while instruments record from other threads, whatever
else collects the provider (a flush), and never 200 with an empty body (503 and why instead).
Label values are only the domain's enums: nothing a job writes becomes a label."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider

from activities.metrics import RecoveryMetrics
from goodput import metric_series
from goodput.checkpoints import LostWork
from goodput.models import Category
from goodput.recover.audit import AuditAction, AuditRecord
from goodput.recover.incident import Notification
from goodput.recover.lifecycle import IncidentState
from tests.integration.metrics_harness import samples, serve_metrics
from workers.prometheus import Exposition
from workers.telemetry import instruments, start_at_zero

REPO = Path(__file__).resolve().parents[2]
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def prometheus_name(otel_name: str) -> str:
    return otel_name.replace(".", "_") + "_total"


def zero_series(clusters: tuple[str, ...]) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(prometheus_name(series.name), tuple(sorted(labels.items())))
            for series in metric_series.counters(clusters) for labels in series.label_sets}


# A process as `goodput worker` starts its telemetry, serving /metrics on loopback; it prints the URL.
FRESH = """
import asyncio, sys
from tests.integration.metrics_harness import serve_metrics
from workers.telemetry import setup_metrics

async def main() -> None:
    provider = setup_metrics(None, 60.0, clusters=("lab-a",))
    async with serve_metrics() as url:
        print(url, flush=True)
        await asyncio.to_thread(sys.stdin.readline)
    provider.shutdown()

asyncio.run(main())
"""


async def test_a_fresh_process_serves_every_counter_at_zero() -> None:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES and not k.startswith("OTEL_")}
    process = subprocess.Popen([sys.executable, "-c", FRESH], cwd=REPO, env=env, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        url = (await asyncio.to_thread(process.stdout.readline)).strip()
        assert url.startswith("http://127.0.0.1:"), process.stderr.read() if process.stderr else ""
        async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
            answer = await client.get(url)
    finally:
        process.communicate("\n", timeout=30)
    assert answer.status_code == 200, answer.text
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples(answer.content)}
    expected = zero_series(("lab-a",))
    assert expected - set(found) == set(), "series missing at start-up"
    assert all(found[series] == 0 for series in expected)
    assert len(expected) == 36 + 4 + 12 * 5 + 12 + 1 + 1


@pytest.fixture
async def served(exposition: Exposition) -> AsyncIterator[tuple[Exposition, MeterProvider, str]]:
    """The published exposition's provider and `/metrics` served over loopback."""
    provider = MeterProvider(metric_readers=[exposition.reader])
    try:
        async with serve_metrics() as url:
            yield exposition, provider, url
    finally:
        provider.shutdown()


def notification(i: int) -> Notification:
    return Notification(incident_id=f"incident-{i}", state=IncidentState.RECOVERED, summary="recovered",
                        category=Category.GPU_HARDWARE, lost_work=LostWork(iterations=1, seconds=60, gpu_hours=0.5))


async def test_concurrent_scrapes_while_recording_and_flushing_are_always_complete(
        served: tuple[Exposition, MeterProvider, str]) -> None:
    _, provider, url = served
    meter = provider.get_meter("goodput")
    start_at_zero(("lab-a",), meter)
    expected = {name for name, _ in zero_series(("lab-a",))}
    sink, recovery = instruments(meter), RecoveryMetrics(meter)
    stop = threading.Event()

    def record(worker: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            sink.anomalies.add(1, {"source": "log", "kind": "crash"})
            sink.detection_latency.record(0.3, {"source": "log", "kind": "crash"})
            recovery.accepted(AuditAction.DRAIN, datetime.now(UTC) - timedelta(seconds=3))
            recovery.notified(notification(worker * 1_000_000 + i))

    def flush() -> None:  # another reader's export, an operator's force_flush: collections outside a scrape
        while not stop.is_set():
            provider.force_flush()

    threads = [threading.Thread(target=record, args=(n,), daemon=True) for n in range(3)]
    threads.append(threading.Thread(target=flush, daemon=True))
    for thread in threads:
        thread.start()
    bad: list[str] = []
    try:
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
            for _ in range(40):
                answers = await asyncio.gather(*(client.get(url) for _ in range(4)))
                for answer in answers:
                    try:
                        assert answer.status_code == 200, answer.text
                        names = {s.name for s in samples(answer.content)}
                        assert expected <= names, f"missing {expected - names}"
                    except AssertionError as err:
                        bad.append(str(err)[:300])
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert not bad, f"{len(bad)} of 160 scrapes incomplete, first: {bad[0]}"


async def test_a_shut_down_provider_answers_503_with_why_never_an_empty_200(
        served: tuple[Exposition, MeterProvider, str]) -> None:
    _, provider, url = served
    instruments(provider.get_meter("goodput")).anomalies.add(1, {"source": "log", "kind": "crash"})
    provider.shutdown()
    async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
        answer = await client.get(url)
    assert answer.status_code == 503
    assert "no metrics to expose" in answer.text


async def test_nothing_a_job_writes_becomes_a_label(served: tuple[Exposition, MeterProvider, str]) -> None:
    exposition, provider, _ = served
    meter = provider.get_meter("goodput")
    start_at_zero(("lab-a",), meter)
    recovery = RecoveryMetrics(meter)
    hostile = 'job"} 1\nevil_total{x="'
    recovery.notified(Notification(incident_id=hostile, state=IncidentState.STOPPED, summary=hostile,
                                   detail=hostile, category=Category.OOM))
    recovery.audited([AuditRecord(id="i-1#1", at=datetime.now(UTC), actor="goodput", action=AuditAction.BREAKER_TRIP,
                                  incident_id="i-1", cluster="lab-a", job_id="7", reason=hostile)])
    body = exposition.render()
    assert b"evil" not in body and b"job\\\"" not in body
    for sample in samples(body):
        if sample.name.startswith("goodput_"):
            base = sample.name.removesuffix("_total")
            otel = {prometheus_name(s.name).removesuffix("_total"): s.name for s in metric_series.counters()}[base]
            assert metric_series.known(otel, sample.labels, ("lab-a",)), sample
