"""The NVSentinel gRPC receiver, called by a grpc.aio channel: the platform connector's method in
both spellings, with and without the bearer token, oversized, garbled and overfull calls, rejections
in trailers, retries, a client built from the legacy proto, and a receiver that stopped."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2, message_factory

from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from activities.adapters.nvsentinel.proto import health_event_pb2_grpc as pb_grpc
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.nvsentinel import NvSentinelSettings
from tests.fakes.sink import RecordingSink
from tests.integration.nvsentinel.cases import AUTH, LEGACY, METHOD, TOKEN, UUID, batch, caller, status_of, xid_proto
from workers.nvsentinel.grpc_receiver import REJECTED_KEY, REJECTION_KEY
from workers.nvsentinel.server import NvSentinelReceivers, serve_nvsentinel

# -- gRPC --------------------------------------------------------------------------------------------


async def test_both_method_names_with_the_token_open_incidents(receivers: NvSentinelReceivers,
                                                               channel: grpc.aio.Channel, sink: RecordingSink) -> None:
    assert receivers.grpc is not None and receivers.grpc.target.startswith("127.0.0.1:")
    assert await caller(channel)(batch(xid_proto("node1")), metadata=AUTH, timeout=10) == empty_pb2.Empty()
    await caller(channel, LEGACY)(batch(xid_proto("node3")), metadata=AUTH, timeout=10)
    assert [(a.job_id, a.nodes, a.gpus) for a in sink.anomalies] == [("1001", ("node1",), (UUID,)),
                                                                      ("1002", ("node3",), (UUID,))]
    # the generated stub (what a client built from the proto uses) reaches the same method
    await pb_grpc.PlatformConnectorStub(channel).HealthEventOccurredV1(batch(xid_proto("node5")), metadata=AUTH)
    assert sink.anomalies[-1].job_id == "1003"


async def test_without_or_with_a_wrong_token_it_is_unauthenticated(channel: grpc.aio.Channel,
                                                                   sink: RecordingSink) -> None:
    for method in (METHOD, LEGACY):
        assert await status_of(caller(channel, method)(batch(xid_proto()), timeout=10)) is (
            grpc.StatusCode.UNAUTHENTICATED)
        assert await status_of(caller(channel, method)(
            batch(xid_proto()), metadata=(("authorization", "Bearer not-the-token-at-all"),), timeout=10)) is (
            grpc.StatusCode.UNAUTHENTICATED)
    assert sink.anomalies == []


async def test_oversized_garbled_and_overfull_calls_are_refused(channel: grpc.aio.Channel,
                                                                sink: RecordingSink) -> None:
    huge = xid_proto()
    huge.message = "x" * (70 << 10)
    assert await status_of(caller(channel)(batch(huge), metadata=AUTH, timeout=10)) is (
        grpc.StatusCode.RESOURCE_EXHAUSTED)
    raw = channel.unary_unary(METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.aio.AioRpcError) as garbled:
        await raw(b"\xff\xff\xff\xff not protobuf", metadata=AUTH, timeout=10)
    assert garbled.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "HealthEvents" in (garbled.value.details() or "")
    many = batch(*(xid_proto() for _ in range(51)))
    with pytest.raises(grpc.aio.AioRpcError) as overfull:
        await caller(channel)(many, metadata=AUTH, timeout=10)
    assert overfull.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "limit 50" in (overfull.value.details() or "")
    assert sink.anomalies == []


async def test_unusable_events_are_reported_in_trailers_and_the_rest_handled(channel: grpc.aio.Channel,
                                                                           sink: RecordingSink) -> None:
    call = caller(channel)(batch(xid_proto("node99"), pb.HealthEvent(isHealthy=True), xid_proto("node3")),
                           metadata=AUTH, timeout=10)
    await call
    trailers = dict(await call.trailing_metadata())
    assert trailers[REJECTED_KEY] == "1" and "not a node Slurm knows" in trailers[REJECTION_KEY]
    assert [a.job_id for a in sink.anomalies] == ["1002"]


async def test_a_failing_sink_asks_nvsentinel_to_retry_and_the_retry_counts_once(channel: grpc.aio.Channel,
                                                                                sink: RecordingSink) -> None:
    sink.failing = True
    assert await status_of(caller(channel)(batch(xid_proto()), metadata=AUTH, timeout=10)) is (
        grpc.StatusCode.UNAVAILABLE)
    sink.failing = False
    for _ in range(3):  # NVSentinel's retries, then a redelivery
        await caller(channel)(batch(xid_proto()), metadata=AUTH, timeout=10)
    assert [a.job_id for a in sink.anomalies] == ["1001"]


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None, reason="grpcio-tools (the dev extra) is missing")
async def test_a_client_built_from_the_legacy_proto(tmp_path: Path, channel: grpc.aio.Channel,
                                                    sink: RecordingSink) -> None:
    """Older NVSentinel: the rpc `HealthEventOccuredV1`, the enum `RecommenedAction`. Its messages are
    built here from that proto (compiled now, in a pool of their own) and sent as it would send them."""
    (tmp_path / "legacy.proto").write_text("""
        syntax = "proto3";
        package datamodels;
        import "google/protobuf/empty.proto";
        import "google/protobuf/timestamp.proto";
        service PlatformConnector { rpc HealthEventOccuredV1(HealthEvents) returns (google.protobuf.Empty); }
        message HealthEvents { uint32 version = 1; repeated HealthEvent events = 2; }
        enum RecommenedAction { NONE = 0; COMPONENT_RESET = 2; CONTACT_SUPPORT = 5; RUN_FIELDDIAG = 6;
                                RESTART_VM = 15; RESTART_BM = 24; REPLACE_VM = 25; UNKNOWN = 99; }
        message Entity { string entityType = 1; string entityValue = 2; }
        message HealthEvent {
          uint32 version = 1; string agent = 2; string componentClass = 3; string checkName = 4; bool isFatal = 5;
          bool isHealthy = 6; string message = 7; RecommenedAction recommendedAction = 8;
          repeated string errorCode = 9; repeated Entity entitiesImpacted = 10; map<string, string> metadata = 11;
          google.protobuf.Timestamp generatedTimestamp = 12; string nodeName = 13;
        }""")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}", "--include_imports",
                    f"--descriptor_set_out={tmp_path / 'legacy.pb'}", "legacy.proto"], check=True, timeout=60,
                   capture_output=True)
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString((tmp_path / "legacy.pb").read_bytes()).file:
        pool.Add(file)
    legacy_events = message_factory.GetMessageClass(pool.FindMessageTypeByName("datamodels.HealthEvents"))
    assert pool.FindEnumTypeByName("datamodels.RecommenedAction").values_by_name["REPLACE_VM"].number == 25
    request = legacy_events()
    event = request.events.add(agent="syslog-health-monitor", componentClass="GPU", checkName="SysLogsXIDError",
                               isFatal=True, recommendedAction=25, errorCode=["48"], nodeName="node5")
    event.generatedTimestamp.GetCurrentTime()
    event.entitiesImpacted.add(entityType="PCI", entityValue="0000:3B:00.0")
    legacy_call = channel.unary_unary(LEGACY, request_serializer=legacy_events.SerializeToString,
                                      response_deserializer=empty_pb2.Empty.FromString)
    await legacy_call(request, metadata=AUTH, timeout=10)
    [anomaly] = sink.anomalies
    assert (anomaly.job_id, anomaly.gpus, anomaly.signature_ids) == ("1003", ("0000:3b:00.0",), ("xid-48",))
    assert any("REPLACE_VM" in line for line in anomaly.evidence)



async def test_receivers_stop_cleanly(sink: RecordingSink) -> None:
    settings = NvSentinelSettings(enabled=True, grpc_port=0, http_port=0, tokens=(TOKEN,))
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        assert running.grpc is not None
        target = running.grpc.target
    async with grpc.aio.insecure_channel(target) as closed:
        with pytest.raises(grpc.aio.AioRpcError):
            await caller(closed)(batch(xid_proto()), metadata=AUTH, timeout=1)
    await asyncio.sleep(0)

