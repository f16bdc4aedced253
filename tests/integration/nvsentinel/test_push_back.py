"""Verdicts pushed back to NVSentinel: goodput's drains reach a recording platform connector as
STORE_ONLY events with the token, and an unreachable NVSentinel never fails the audit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2

from activities.adapters.audit import MemoryAuditLog
from activities.adapters.nvsentinel import VerdictPushBack
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from activities.adapters.nvsentinel.proto import health_event_pb2_grpc as pb_grpc
from goodput.detect.nvsentinel import NvSentinelPushBack
from goodput.recover.audit import AuditAction, AuditRecord
from tests.integration.nvsentinel.cases import TOKEN

# -- push-back ----------------------------------------------------------------------------------------


class RecordingPlatformConnector(pb_grpc.PlatformConnectorServicer):
    """NVSentinel's side, as far as goodput's push-back sees it."""

    def __init__(self) -> None:
        self.requests: list[tuple[pb.HealthEvents, dict[str, str]]] = []

    async def HealthEventOccurredV1(self, request: pb.HealthEvents, context: Any) -> empty_pb2.Empty:
        self.requests.append((request, dict(context.invocation_metadata())))
        return empty_pb2.Empty()


@asynccontextmanager
async def platform_connector() -> AsyncIterator[tuple[RecordingPlatformConnector, str]]:
    connector = RecordingPlatformConnector()
    server = grpc.aio.server()
    pb_grpc.add_PlatformConnectorServicer_to_server(connector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield connector, f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


def drain_record(nodes: tuple[str, ...] = ("node3",), n: int = 1) -> AuditRecord:
    return AuditRecord(id=f"incident-lab-1002-0#{n}", at=datetime.now(UTC), actor="goodput", action=AuditAction.DRAIN,
                       incident_id="incident-lab-1002-0", cluster="lab", job_id="1002", nodes=nodes,
                       reason="gpu-hardware on node3", result="drained node3")


async def test_drains_are_pushed_back_as_store_only_events(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    inner = MemoryAuditLog()
    async with platform_connector() as (connector, target):
        settings = NvSentinelPushBack(enabled=True, target=target, token_file=tmp_path / "token", timeout_s=5)
        log = VerdictPushBack(inner, settings, node_names={"k8s-gpu-3": "node3"})
        requeue = drain_record().model_copy(update={"id": "incident-lab-1002-0#2", "action": AuditAction.REQUEUE})
        await asyncio.to_thread(log.append, [drain_record(), requeue])  # as the audit activity calls it
        log.close()
    assert log.read() == inner.read() and len(inner.records) == 2  # the real log keeps everything
    [(request, metadata)] = connector.requests
    [event] = request.events
    assert (event.nodeName, event.processingStrategy, event.isFatal, event.recommendedAction) == (
        "k8s-gpu-3", pb.STORE_ONLY, False, pb.NONE)
    assert event.agent == "goodput" and "incident-lab-1002-0" in event.message and "drained node3" in event.message
    assert metadata["authorization"] == f"Bearer {TOKEN}" and log.sent == 1


async def test_an_unreachable_nvsentinel_never_fails_the_audit() -> None:
    async with platform_connector() as (_, target):
        pass  # stopped: nothing listens there now
    inner = MemoryAuditLog()
    log = VerdictPushBack(inner, NvSentinelPushBack(enabled=True, target=target, timeout_s=1))
    await asyncio.to_thread(log.append, [drain_record()])
    log.close()
    assert len(inner.records) == 1 and log.failures == 1 and log.sent == 0

