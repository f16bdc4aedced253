"""Detection latency reaches OpenTelemetry as a histogram, per anomaly source and kind."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from goodput.cli.service import IncidentSummary, InjectResult
from goodput.models import Anomaly, Mode
from goodput.recover.incident import Decision, IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from workers.watching import IncidentSink


class Service:
    def __init__(self) -> None:
        self.injected: list[Anomaly] = []

    async def inject(self, anomaly: Anomaly, policy: Policy, mode: Mode | None = None) -> InjectResult:
        self.injected.append(anomaly)
        return InjectResult(incident_id="incident-x", new_incident=True)

    async def list_incidents(self, limit: int = 50, cluster: str | None = None) -> Sequence[IncidentSummary]:
        raise NotImplementedError

    async def get(self, incident_id: str) -> IncidentReport:
        raise NotImplementedError

    async def decide(self, incident_id: str, decision: Decision) -> IncidentState:
        raise NotImplementedError


async def test_detection_latency_histogram() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    service = Service()
    sink = IncidentSink(service, Policy(), meter=meter)
    observed = datetime.now(UTC) - timedelta(seconds=0.3)
    for i in range(3):
        await sink.submit(Anomaly(id=f"a{i}", source="log", kind="gpu-fault", job_id="7", observed_at=observed,
                                  detected_at=observed + timedelta(seconds=0.25)))
    assert len(service.injected) == 3
    data = reader.get_metrics_data()
    points: dict[str, HistogramDataPoint] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if isinstance(point, HistogramDataPoint):
                        points[metric.name] = point
    detection = points["goodput.detection.latency"]
    assert detection.count == 3 and abs(detection.sum - 0.75) < 1e-6
    assert dict(detection.attributes or {}) == {"source": "log", "kind": "gpu-fault"}
    assert points["goodput.anomaly.submit.latency"].count == 3
