"""What the NVSentinel integration tests share, and what the Slurm-lab test
(tests/slurm/test_nvsentinel_on_slurm.py) sends with: the receivers' token, health events as
protobuf and as the event exporter's CloudEvents, and a gRPC caller. The receivers themselves are
fixtures in conftest.py beside this file."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2

from activities.adapters.nvsentinel import event_to_proto
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import parse_event

TOKEN = "nvsentinel-token-0123456789"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
METHOD = "/datamodels.PlatformConnector/HealthEventOccurredV1"
LEGACY = "/datamodels.PlatformConnector/HealthEventOccuredV1"
UUID = "GPU-8d0c5a7e-1f2b-4c3d-9e8f-0123456789ab"
CE_HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/cloudevents+json"}


def xid_json(node: str = "node1", **update: Any) -> dict[str, Any]:
    return {"version": 1, "agent": "syslog-health-monitor", "componentClass": "GPU", "checkName": "SysLogsXIDError",
            "isFatal": True, "message": "GPU has fallen off the bus", "recommendedAction": "RESTART_BM",
            "errorCode": ["79"], "entitiesImpacted": [{"entityType": "GPU_UUID", "entityValue": UUID}],
            "generatedTimestamp": "2026-11-29T09:29:58Z", "nodeName": node, **update}


def xid_proto(node: str = "node1", **update: Any) -> pb.HealthEvent:
    message = event_to_proto(parse_event(xid_json(node, **update)))
    message.generatedTimestamp.GetCurrentTime()  # fresh: older than max_event_age_s would be recorded only
    return message


def batch(*events: pb.HealthEvent) -> pb.HealthEvents:
    return pb.HealthEvents(version=1, events=list(events))


def cloudevent(event: dict[str, Any] | None = None, **update: Any) -> bytes:
    """As NVSentinel's event exporter writes one: no datacontenttype, the action as its number, every
    field present, a `gpuUUID` convenience field, the cluster in data.metadata."""
    health = event if event is not None else xid_json()
    if isinstance(health.get("recommendedAction"), str):
        health = {**health, "recommendedAction": pb.RecommendedAction.Value(health["recommendedAction"])}
    document: dict[str, Any] = {"specversion": "1.0", "id": "6c1c8d1e-0d4a-4f57-9d0e-3f4e2b1a9c77",
                                "source": "nvsentinel://cluster-a/healthevents",
                                "type": "com.nvidia.nvsentinel.health.v1", "time": "2026-11-29T09:29:58.123456789Z",
                                "data": {"metadata": {"cluster": "cluster-a", "csp": "onprem"},
                                         "healthEvent": {"isHealthy": False, "errorCode": [], "entitiesImpacted": [],
                                                         "gpuUUID": UUID, **health}}}
    document.update(update)
    return json.dumps(document).encode()


def fresh(**update: Any) -> dict[str, Any]:
    """A fatal event generated now (the receivers pin only recent events on running jobs)."""
    return xid_json(generatedTimestamp=datetime.now(UTC).isoformat(), **update)



def caller(channel: grpc.aio.Channel, method: str = METHOD) -> Any:
    return channel.unary_unary(method, request_serializer=pb.HealthEvents.SerializeToString,
                               response_deserializer=empty_pb2.Empty.FromString)


async def status_of(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value.code()
