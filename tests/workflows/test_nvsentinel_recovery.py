"""NVSentinel to recovery on the real Temporal dev server: a fatal health event sent over real gRPC
drains the node and requeues the job in autonomous mode (and the drain is pushed back to a stand-in
platform connector as a STORE_ONLY event); a node NVSentinel already drained is left as NVSentinel
drained it, and the job is still requeued off it."""

from __future__ import annotations

import io
import re
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2
from rich.console import Console
from temporalio.client import Client

from activities.adapters.audit import MemoryAuditLog
from activities.adapters.nvsentinel import VerdictPushBack
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from activities.adapters.nvsentinel.proto import health_event_pb2_grpc as pb_grpc
from goodput.config import Settings
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.nvsentinel import NvSentinelPushBack, NvSentinelSettings
from goodput.models import Category, IncidentKey, Mode
from goodput.recover.lifecycle import IncidentState
from tests.workflows.helpers import FAST, result, running_worker
from workers.client import TemporalIncidentService
from workers.nvsentinel.server import serve_nvsentinel
from workers.serve import service_extras
from workers.watch import IncidentSink

pytestmark = pytest.mark.temporal
TOKEN = "nvsentinel-token-0123456789"
UUID = "GPU-8d0c5a7e-1f2b-4c3d-9e8f-0123456789ab"


def fatal_xid(node: str) -> pb.HealthEvents:
    event = pb.HealthEvent(version=1, agent="syslog-health-monitor", componentClass="GPU",
                           checkName="SysLogsXIDError", isFatal=True, message="GPU has fallen off the bus",
                           recommendedAction=pb.RESTART_BM, errorCode=["79"], nodeName=node,
                           entitiesImpacted=[pb.Entity(entityType="GPU_UUID", entityValue=UUID)])
    event.generatedTimestamp.GetCurrentTime()
    return pb.HealthEvents(version=1, events=[event])


async def send(client: Client, task_queue: str, fake: FakeScheduler, cluster: str, node: str) -> None:
    sink = IncidentSink(TemporalIncidentService(client, task_queue), FAST.model_copy(update={"mode": Mode.AUTONOMOUS}))
    settings = NvSentinelSettings(enabled=True, grpc_port=0, http_enabled=False, tokens=(TOKEN,))
    async with serve_nvsentinel(settings, fake, sink, cluster) as receivers:
        assert receivers.grpc is not None
        async with grpc.aio.insecure_channel(receivers.grpc.target) as channel:
            await pb_grpc.PlatformConnectorStub(channel).HealthEventOccurredV1(
                fatal_xid(node), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=30)


class RecordingPlatformConnector(pb_grpc.PlatformConnectorServicer):
    def __init__(self) -> None:
        self.events: list[pb.HealthEvent] = []

    async def HealthEventOccurredV1(self, request: pb.HealthEvents, context: Any) -> empty_pb2.Empty:
        self.events.extend(request.events)
        return empty_pb2.Empty()


async def test_a_fatal_event_drains_the_node_and_requeues_the_job(client: Client, task_queue: str) -> None:
    """…and, with push-back on, NVSentinel is told (STORE_ONLY) which node goodput drained."""
    cluster = f"nvs{uuid.uuid4().hex[:6]}"
    connector, server = RecordingPlatformConnector(), grpc.aio.server()
    pb_grpc.add_PlatformConnectorServicer_to_server(connector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    push_back = VerdictPushBack(MemoryAuditLog(), NvSentinelPushBack(enabled=True, target=f"127.0.0.1:{port}"))
    try:
        async with running_worker(client, task_queue, audit_log=push_back) as fake:
            await send(client, task_queue, fake, cluster, "node3")
            report = await result(client, IncidentKey(cluster=cluster, job_id="1002", job_attempt=0).workflow_id)
    finally:
        push_back.close()
        await server.stop(grace=None)
    assert report.state is IncidentState.RECOVERED
    assert report.attribution is not None and report.attribution.category is Category.GPU_HARDWARE
    assert report.attribution.culprit_nodes == ("node3",)
    assert [(e.op, e.target) for e in fake.journal() if e.op in {"drain", "requeue"}] == [
        ("drain", "node3"), ("requeue", "1002")]
    [verdict] = connector.events
    assert (verdict.nodeName, verdict.processingStrategy, verdict.agent) == ("node3", pb.STORE_ONLY, "goodput")
    assert report.incident_id in verdict.message


async def test_a_node_nvsentinel_drained_is_left_as_it_is(client: Client, task_queue: str) -> None:
    cluster = f"nvs{uuid.uuid4().hex[:6]}"
    theirs = "NVSentinel: cordoned for SysLogsXIDError"
    async with running_worker(client, task_queue) as fake:
        await fake.drain_node("node5", theirs)
        await send(client, task_queue, fake, cluster, "node5")
        report = await result(client, IncidentKey(cluster=cluster, job_id="1003", job_attempt=0).workflow_id)
    assert report.state is IncidentState.RECOVERED
    assert (await fake.get_node("node5")).reason == theirs
    assert [(e.op, e.target) for e in fake.journal() if e.op in {"drain", "requeue"}] == [
        ("drain", "node5"), ("requeue", "1003")]
    assert [e.detail for e in fake.journal("drain")] == [theirs]  # NVSentinel's drain, and no other


async def test_the_service_starts_the_receivers_from_goodput_toml(client: Client, task_queue: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`[nvsentinel]` in goodput.toml: `goodput up` / `goodput worker` serve the receivers beside the
    worker (workers/serve.py), and an event reaches an incident workflow through Temporal."""
    cluster = f"nvs{uuid.uuid4().hex[:6]}"
    toml = tmp_path / "goodput.toml"
    toml.write_text(f'cluster = "{cluster}"\nwatch = false\ntask_queue = "{task_queue}"\n'
                    f'data_dir = "{tmp_path / "data"}"\n'
                    f'[nvsentinel]\nenabled = true\ngrpc_port = 0\nhttp_port = 0\ntokens = ["{TOKEN}"]\n')
    monkeypatch.setenv("GOODPUT_CONFIG", str(toml))
    settings = Settings()
    out = io.StringIO()
    async with service_extras(settings, client, Console(file=out, width=300)):
        target = re.search(r"gRPC at (127\.0\.0\.1:\d+)", out.getvalue())
        assert target is not None, out.getvalue()
        async with grpc.aio.insecure_channel(target.group(1)) as channel:
            await pb_grpc.PlatformConnectorStub(channel).HealthEventOccurredV1(
                fatal_xid("node1"), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=30)
    handle = client.get_workflow_handle(IncidentKey(cluster=cluster, job_id="1001", job_attempt=0).workflow_id)
    assert (await handle.describe()).id == handle.id  # the incident was opened (no worker runs it here)
    await handle.terminate("test over")
