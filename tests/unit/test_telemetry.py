"""goodput's metrics: detection latency per anomaly source and kind, its Prometheus exposition, and
what the recovery activities count (actions, drains, closed incidents, lost work, breaker trips),
each once however often Temporal retries the activity."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from starlette.requests import Request
from temporalio.testing import ActivityEnvironment

from activities.metrics import RecoveryMetrics
from activities.recovery import RecoveryActivities
from goodput import metric_series
from goodput.checkpoints import LostWork
from goodput.demo.scheduler import FakeScheduler
from goodput.models import Anomaly, Category, Mode
from goodput.recover.audit import AuditAction, AuditRecord
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import (
    AuditInput,
    Decision,
    IncidentReport,
    IsolateInput,
    Notification,
    ResumeInput,
    StopInput,
)
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.service.incidents import IncidentSummary, InjectResult
from tests.fakes.notifier import RecordingNotifier
from workers.metrics_endpoint import metrics_endpoint
from workers.prometheus import CONTENT_TYPE, Exposition, publish, published
from workers.telemetry import instruments, otlp_url
from workers.watch import IncidentSink


class Service:
    def __init__(self) -> None:
        self.injected: list[Anomaly] = []

    async def inject(self, anomaly: Anomaly, policy: Policy | None, mode: Mode | None = None) -> InjectResult:
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
    assert data is not None
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


# -- the Prometheus exposition ---------------------------------------------------------------


def get(path: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""})


async def test_metrics_endpoint_serves_the_detection_histogram(exposition: Exposition) -> None:
    meter = MeterProvider(metric_readers=[exposition.reader]).get_meter("goodput")
    latency = instruments(meter).detection_latency
    for seconds in (0.2, 0.3, 4.0):
        latency.record(seconds, {"source": "log", "kind": "gpu-fault"})
    response = await metrics_endpoint(get("/metrics"))
    assert response.status_code == 200 and response.headers["content-type"] == CONTENT_TYPE
    text = bytes(response.body).decode()
    assert "# TYPE goodput_detection_latency_seconds histogram" in text
    labels = 'kind="gpu-fault",le="{}",source="log"'
    assert f"goodput_detection_latency_seconds_bucket{{{labels.format('0.25')}}} 1.0" in text
    assert f"goodput_detection_latency_seconds_bucket{{{labels.format('0.5')}}} 2.0" in text
    assert f"goodput_detection_latency_seconds_bucket{{{labels.format('+Inf')}}} 3.0" in text
    assert 'goodput_detection_latency_seconds_count{kind="gpu-fault",source="log"} 3.0' in text
    # cumulative: a second scrape sees the same counts, not a delta
    again = bytes((await metrics_endpoint(get("/metrics"))).body).decode()
    assert 'goodput_detection_latency_seconds_count{kind="gpu-fault",source="log"} 3.0' in again


async def test_metrics_endpoint_without_metrics_set_up_says_so() -> None:
    before = published()
    publish(None)
    try:
        response = await metrics_endpoint(get("/metrics"))
    finally:
        publish(before)
    assert response.status_code == 503 and b"setup_metrics" in bytes(response.body)


def test_otlp_urls_follow_the_base_url_convention() -> None:
    assert otlp_url("http://collector:4318", "metrics") == "http://collector:4318/v1/metrics"
    assert otlp_url("https://otel.example/base/", "traces") == "https://otel.example/base/v1/traces"


# -- what the recovery activities count -------------------------------------------------------


class Recorded:
    """The recovery activities over the fake cluster, with their metrics in memory."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.scheduler = FakeScheduler()
        self.notifier = RecordingNotifier()
        self.meter = MeterProvider(metric_readers=[self.reader]).get_meter("t")
        self.activities = RecoveryActivities(self.scheduler, self.notifier, LocalDrainGate(), meter=self.meter)
        self.env = ActivityEnvironment()

    def points(self, name: str) -> dict[frozenset[tuple[str, object]], HistogramDataPoint | NumberDataPoint]:
        found: dict[frozenset[tuple[str, object]], HistogramDataPoint | NumberDataPoint] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            assert isinstance(point, HistogramDataPoint | NumberDataPoint)
                            found[frozenset((point.attributes or {}).items())] = point
        return found

    def value(self, name: str, **labels: str) -> float:
        point = self.points(name).get(frozenset(labels.items()))
        assert point is None or isinstance(point, NumberDataPoint)
        return float(point.value) if point else 0.0

    def latency(self, action: str) -> HistogramDataPoint | None:
        point = self.points("goodput.action.latency").get(frozenset({("action", action)}))
        assert point is None or isinstance(point, HistogramDataPoint)
        return point


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


def ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


async def test_drains_counted_and_timed_once_per_node_slurm_drained(recorded: Recorded) -> None:
    request = IsolateInput(incident_id="inc-1", nodes=("node2", "node3"), summary="xid 79", observed_at=ago(30))
    await recorded.env.run(recorded.activities.isolate, request)
    await recorded.env.run(recorded.activities.isolate, request)  # a retry: both already drained
    assert recorded.value("goodput.drains") == 2
    latency = recorded.latency("drain")
    assert latency is not None and latency.count == 2
    assert 60 <= latency.sum < 70  # 30 s after the failure was observable, each


async def test_a_node_someone_else_drained_is_not_counted(recorded: Recorded) -> None:
    await recorded.scheduler.drain_node("node4", "admin: bad PSU")
    await recorded.env.run(recorded.activities.isolate, IsolateInput(
        incident_id="inc-2", nodes=("node4",), summary="xid", observed_at=ago(5)))
    assert recorded.value("goodput.drains") == 0 and recorded.latency("drain") is None


async def test_requeue_resubmit_and_stop_are_timed_once_each(recorded: Recorded) -> None:
    requeue = ResumeInput(incident_id="inc-3", job_id="1001", strategy=ResumeStrategy.REQUEUE, observed_at=ago(20))
    resubmit = ResumeInput(incident_id="inc-4", job_id="1002", strategy=ResumeStrategy.RESUBMIT,
                           observed_at=ago(40))
    stop = StopInput(incident_id="inc-5", job_id="1003", observed_at=ago(80))
    for _ in range(2):  # the second round is Temporal retrying each activity: all no-ops now
        await recorded.env.run(recorded.activities.resume, requeue)
        await recorded.env.run(recorded.activities.resume, resubmit)
        await recorded.env.run(recorded.activities.stop_job, stop)
    for action, seconds in (("requeue", 20), ("resubmit", 40), ("stop", 80)):
        latency = recorded.latency(action)
        assert latency is not None and latency.count == 1, action
        assert seconds <= latency.sum < seconds + 10, action
    assert recorded.value("goodput.drains") == 0


async def test_actions_of_workflows_that_send_no_observation_time_record_no_latency(recorded: Recorded) -> None:
    await recorded.env.run(recorded.activities.isolate, IsolateInput(incident_id="inc-6", nodes=("node5",),
                                                                     summary="xid"))
    await recorded.env.run(recorded.activities.stop_job, StopInput(incident_id="inc-6", job_id="1003"))
    assert recorded.value("goodput.drains") == 1
    assert recorded.points("goodput.action.latency") == {}


async def test_closed_incidents_and_lost_gpu_hours_count_once_per_incident(recorded: Recorded) -> None:
    closed = Notification(incident_id="inc-7", state=IncidentState.RECOVERED, summary="recovered",
                          category=Category.GPU_HARDWARE, lost_work=LostWork(iterations=100, seconds=600,
                                                                              gpu_hours=2.5))
    await recorded.env.run(recorded.activities.notify, Notification(
        incident_id="inc-7", state=IncidentState.AWAITING_APPROVAL, summary="approval needed"))
    await recorded.env.run(recorded.activities.notify, closed)
    await recorded.env.run(recorded.activities.notify, closed)  # a retry
    await recorded.env.run(recorded.activities.notify, Notification(
        incident_id="inc-8", state=IncidentState.ESCALATED, summary="escalated"))  # from an older workflow
    assert recorded.value("goodput.incidents.closed", category="gpu-hardware", outcome="recovered") == 1
    assert recorded.value("goodput.incidents.closed", category="unknown", outcome="escalated") == 1
    assert len(recorded.points("goodput.incidents.closed")) == 2
    assert recorded.value("goodput.lost_gpu_hours", category="gpu-hardware") == 2.5
    assert len(recorded.notifier.sent) == 4  # counting never stops a notification


async def test_a_closed_incident_counts_though_its_webhook_fails(recorded: Recorded) -> None:
    class Broken(RecordingNotifier):
        async def notify(self, notification: Notification) -> None:
            raise RuntimeError("webhook down")

    activities = RecoveryActivities(recorded.scheduler, Broken(), LocalDrainGate(), meter=recorded.meter)
    for _ in range(3):  # every attempt of the retried activity fails
        with pytest.raises(RuntimeError):
            await recorded.env.run(activities.notify, Notification(
                incident_id="inc-9", state=IncidentState.STOPPED, summary="stopped", category=Category.OOM))
    assert recorded.value("goodput.incidents.closed", category="oom", outcome="stopped") == 1


async def test_breaker_trips_count_once_per_audit_record(recorded: Recorded) -> None:
    def record(n: int, action: AuditAction) -> AuditRecord:
        return AuditRecord(id=f"drain-breaker-c1#run#{n}", at=datetime.now(UTC), actor="goodput", action=action,
                           incident_id="inc-10", cluster="c1", job_id="")

    trip = AuditInput(records=(record(1, AuditAction.BREAKER_TRIP), record(2, AuditAction.BREAKER_RESET)))
    await recorded.env.run(recorded.activities.audit, trip)
    await recorded.env.run(recorded.activities.audit, trip)  # a retry after the log write failed
    await recorded.env.run(recorded.activities.audit, AuditInput(records=(record(3, AuditAction.BREAKER_TRIP),)))
    assert recorded.value("goodput.breaker.trips", cluster="c1") == 2


async def test_an_anomaly_that_opens_an_incident_counts_it_opened_once() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    service = Service()
    sink = IncidentSink(service, Policy(), meter=meter)
    now = datetime.now(UTC)
    await sink.submit(Anomaly(id="a1", source="gpu", kind="gpu-fault", job_id="7", observed_at=now, detected_at=now))
    data = reader.get_metrics_data()
    assert data is not None
    opened = [point for resource in data.resource_metrics for scope in resource.scope_metrics
              for metric in scope.metrics if metric.name == "goodput.incidents.opened"
              for point in metric.data.data_points if isinstance(point, NumberDataPoint)]
    assert [(point.value, dict(point.attributes or {})) for point in opened] == [(1, {"source": "gpu"})]


def test_every_counter_and_histogram_is_in_the_known_series() -> None:
    """goodput.metric_series lists every instrument the recorders create, and nothing else."""
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("test")
    recorders = {**instruments(meter).counters(), **RecoveryMetrics(meter).counters()}
    assert set(recorders) == {series.name for series in metric_series.counters()}
    assert {"goodput.detection.latency", "goodput.anomaly.submit.latency", "goodput.action.latency"} == {
        series.name for series in metric_series.histograms()}
