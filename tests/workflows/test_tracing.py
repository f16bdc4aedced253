"""One recovery, one trace: detector → client → workflow → activities, with the incident id on it."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from tests.workflows.helpers import FAST, anomaly, result, running_worker
from workers.client import TemporalIncidentService, connect
from workers.watch import IncidentSink

pytestmark = pytest.mark.temporal


async def test_a_recovery_is_one_trace_from_the_detector_to_the_last_activity(temporal_address: str,
                                                                             task_queue: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # not the global one: tests must not fight over it
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    client = await connect(temporal_address, tracer=tracer)
    a = anomaly()
    async with running_worker(client, task_queue):
        sink = IncidentSink(TemporalIncidentService(client, task_queue),
                            FAST.model_copy(update={"mode": Mode.AUTONOMOUS}), tracer=tracer)
        await sink.submit(a)
        report = await result(client, a.incident_key.workflow_id)
    assert report.state is IncidentState.RECOVERED
    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.name == "goodput.anomaly"]
    assert root.attributes is not None and root.attributes["goodput.incident_id"] == report.incident_id
    mine = [s for s in spans if s.context is not None and root.context is not None
            and s.context.trace_id == root.context.trace_id]
    names = {s.name for s in mine}
    assert "RunWorkflow:RecoveryWorkflow" in names
    for step in ("attribute", "isolate", "resume", "verify"):
        assert f"RunActivity:{step}" in names, sorted(names)
