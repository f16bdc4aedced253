"""The Grafana dashboard shipped in deploy/grafana/goodput.json: structurally what Grafana imports
(schema version, unique panel ids, every query on the datasource variable), and every panel's
PromQL asked of Debian's real Prometheus scraping a `/metrics` that has recorded some of each.

No Grafana runs here: the dashboard's variables are replaced as Grafana would before it asks
Prometheus (`$__rate_interval`, `$__range`, `$job`).
"""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.metrics import MeterProvider

from activities.metrics import RecoveryMetrics
from goodput.checkpoints import LostWork
from goodput.models import Category
from goodput.recover.audit import AuditAction, AuditRecord
from goodput.recover.incident import Notification
from goodput.recover.lifecycle import IncidentState
from tests.integration.metrics_harness import ask, prometheus, prometheus_or_skip, query, serve_metrics
from workers.prometheus import Exposition
from workers.telemetry import instruments, start_at_zero

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "goodput.json"
# What Grafana substitutes before asking; the test Prometheus scrapes every second.
GRAFANA_VARIABLES = {"$__rate_interval": "20s", "$__range": "1h", "$job": "goodput"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def queries() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard()["panels"] for target in panel["targets"]]


def as_prometheus_sees_it(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def test_the_dashboard_is_what_grafana_imports() -> None:
    board = dashboard()
    assert board["uid"] == "goodput" and board["title"]
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {ids}"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in board["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip(), panel["title"]
    titles = " ".join(panel["title"].lower() for panel in board["panels"])
    for subject in ("opened", "closed", "detection latency", "action latency", "drains", "breaker",
                    "lost gpu-hours", "anomalies", "in progress"):
        assert subject in titles, f"no panel for {subject}"


def record_some_of_each(provider: MeterProvider, batch: int) -> None:
    meter = provider.get_meter("goodput")
    sink, recovery = instruments(meter), RecoveryMetrics(meter)
    labels = {"source": "log", "kind": "gpu-fault"}
    for seconds in (0.3, 0.7, 1.5):
        sink.detection_latency.record(seconds, labels)
        sink.submit_latency.record(seconds / 10, labels)
    sink.anomalies.add(3, labels)
    sink.incidents_opened.add(2, {"source": "log"})
    recovery.accepted(AuditAction.DRAIN, datetime.now(UTC) - timedelta(seconds=40))
    recovery.accepted(AuditAction.REQUEUE, datetime.now(UTC) - timedelta(seconds=50))
    recovery.notified(Notification(incident_id=f"incident-{batch}", state=IncidentState.RECOVERED, summary="ok",
                                   category=Category.GPU_HARDWARE,
                                   lost_work=LostWork(iterations=10, seconds=600, gpu_hours=1.5)))
    recovery.audited([AuditRecord(id=f"incident-{batch}#1", at=datetime.now(UTC), actor="goodput",
                                  action=AuditAction.BREAKER_TRIP, incident_id=f"incident-{batch}",
                                  cluster="lab-a", job_id="7")])


async def test_every_panel_query_answers_from_the_real_prometheus(exposition: Exposition, tmp_path: Path) -> None:
    binary = prometheus_or_skip()
    provider = MeterProvider(metric_readers=[exposition.reader])
    start_at_zero(("lab-a",), provider.get_meter("goodput"))
    record_some_of_each(provider, 1)
    try:
        async with serve_metrics() as url, httpx.AsyncClient(timeout=5, trust_env=False) as client:
            with prometheus(binary, tmp_path, url.removeprefix("http://").removesuffix("/metrics")) as api:
                # Rates need a change between two scrapes: the second batch comes after the first is scraped.
                await query(client, api, "goodput_action_latency_seconds_count")
                record_some_of_each(provider, 2)
                await query(client, api, "sum(goodput_drains_total) >= 2")
                answers = await asyncio.gather(*(ask(client, api, as_prometheus_sees_it(expr), timeout_s=60)
                                                 for _, expr in queries()))
    finally:
        provider.shutdown()
    for (title, expr), answer in zip(queries(), answers, strict=True):
        assert answer.get("status") == "success", f"{title}: {expr}: {answer}"
        result = answer["data"]["result"]
        assert result, f"{title}: {expr}: no data"
        values = [float(series["value"][1]) for series in result]
        assert any(not math.isnan(v) for v in values), f"{title}: {expr}: only NaN {result}"
