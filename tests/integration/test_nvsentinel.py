"""The NVSentinel receivers on 127.0.0.1 (ephemeral ports), spoken to by real clients: a grpc.aio
channel calling the platform connector's method (both spellings, with and without the bearer
token, and a client built from the legacy proto) and httpx posting CloudEvents."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2, message_factory
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from activities.adapters.audit import MemoryAuditLog
from activities.adapters.nvsentinel import VerdictPushBack, event_to_proto
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from activities.adapters.nvsentinel.proto import health_event_pb2_grpc as pb_grpc
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.nvsentinel import NvSentinelPushBack, NvSentinelSettings, parse_event
from goodput.recover.audit import AuditAction, AuditRecord
from tests.fakes.sink import RecordingSink
from workers.http_site import Listener, application
from workers.nvsentinel.grpc_receiver import REJECTED_KEY, REJECTION_KEY
from workers.nvsentinel.server import NvSentinelReceivers, serve_nvsentinel

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


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest_asyncio.fixture
async def receivers(sink: RecordingSink) -> AsyncIterator[NvSentinelReceivers]:
    settings = NvSentinelSettings(enabled=True, grpc_port=0, http_port=0, tokens=(TOKEN,),
                                  max_message_bytes=64 << 10, max_events_per_batch=50)
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        yield running


@pytest_asyncio.fixture
async def channel(receivers: NvSentinelReceivers) -> AsyncIterator[grpc.aio.Channel]:
    assert receivers.grpc is not None
    async with grpc.aio.insecure_channel(receivers.grpc.target) as open_channel:
        yield open_channel


@pytest_asyncio.fixture
async def http(receivers: NvSentinelReceivers) -> AsyncIterator[httpx.AsyncClient]:
    assert receivers.http is not None
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def caller(channel: grpc.aio.Channel, method: str = METHOD) -> Any:
    return channel.unary_unary(method, request_serializer=pb.HealthEvents.SerializeToString,
                               response_deserializer=empty_pb2.Empty.FromString)


async def status_of(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value.code()


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


# -- CloudEvents over HTTP ---------------------------------------------------------------------------


async def test_a_cloudevent_opens_an_incident(receivers: NvSentinelReceivers, http: httpx.AsyncClient,
                                              sink: RecordingSink) -> None:
    assert receivers.http is not None
    url = receivers.http.url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1/nvsentinel/events")
    response = await http.post(url, content=cloudevent(fresh()), headers=CE_HEADERS)
    assert response.status_code == 200, response.text
    assert response.json() == {"outcome": "incident", "anomalies": 1}
    [anomaly] = sink.anomalies
    assert (anomaly.job_id, anomaly.nodes, anomaly.gpus) == ("1001", ("node1",), (UUID,))
    again = await http.post(url, content=cloudevent(fresh(), id="e-2"), headers=CE_HEADERS)  # at-least-once
    assert again.json() == {"outcome": "duplicate", "anomalies": 0} and len(sink.anomalies) == 1
    healthy = await http.post(url, content=cloudevent({"nodeName": "node1", "isHealthy": True, "isFatal": False,
                                                       "recommendedAction": 0}), headers=CE_HEADERS)
    assert healthy.json()["outcome"] == "ignored"
    health = await http.get(url.replace("/v1/nvsentinel/events", "/healthz"))
    assert health.status_code == 200 and health.headers["Server"] == "goodput"


async def test_the_two_transports_share_one_dedup_window(receivers: NvSentinelReceivers, channel: grpc.aio.Channel,
                                                         http: httpx.AsyncClient, sink: RecordingSink) -> None:
    assert receivers.http is not None
    await caller(channel)(batch(xid_proto("node3")), metadata=AUTH, timeout=10)
    response = await http.post(receivers.http.url, content=cloudevent(fresh(nodeName="node3")), headers=CE_HEADERS)
    assert response.json()["outcome"] == "duplicate" and len(sink.anomalies) == 1


@pytest.mark.parametrize(("body", "headers", "status", "message"), [
    (cloudevent(), {"Content-Type": "application/cloudevents+json"}, 401, "token"),
    (cloudevent(), {**CE_HEADERS, "Authorization": "Bearer wrong-token-0123456789"}, 401, "token"),
    (cloudevent(), {**CE_HEADERS, "Content-Type": "text/plain"}, 415, "structured mode"),
    (b"[" + cloudevent() + b"]", {**CE_HEADERS, "Content-Type": "application/cloudevents-batch+json"}, 415,
     "structured mode"),
    (b"{not json", CE_HEADERS, 400, "not JSON"),
    (cloudevent(data={"metadata": {"cluster": "a"}}), CE_HEADERS, 400, "no healthEvent"),
    (cloudevent(specversion="0.3"), CE_HEADERS, 400, "specversion"),
    (cloudevent(xid_json(isFatal="yes")), CE_HEADERS, 422, "isFatal"),
    # Built when the test runs: an event generated at collection time is stale in a long suite.
    (lambda: cloudevent(fresh(nodeName="node99")), CE_HEADERS, 422, "not a node Slurm knows"),
    (lambda: cloudevent(fresh(nodeName="node1;reboot")), CE_HEADERS, 422, "node name"),
    (b" " * (65 << 10), CE_HEADERS, 413, "limit"),
])
async def test_bad_requests_get_a_4xx_with_a_reason(receivers: NvSentinelReceivers, http: httpx.AsyncClient,
                                                    sink: RecordingSink, body: bytes | Callable[[], bytes],
                                                    headers: dict[str, str], status: int, message: str) -> None:
    assert receivers.http is not None
    content = body() if callable(body) else body
    response = await http.post(receivers.http.url, content=content, headers=headers)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]
    assert sink.anomalies == []


async def test_a_huge_chunked_body_is_cut_off(receivers: NvSentinelReceivers, http: httpx.AsyncClient) -> None:
    assert receivers.http is not None

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield b" " * 4096

    response = await http.post(receivers.http.url, content=chunks(), headers=CE_HEADERS)
    assert response.status_code == 413


async def test_a_failing_sink_is_a_503_with_retry_after(receivers: NvSentinelReceivers, http: httpx.AsyncClient,
                                                         sink: RecordingSink) -> None:
    assert receivers.http is not None
    sink.failing = True
    response = await http.post(receivers.http.url, content=cloudevent(fresh()), headers=CE_HEADERS)
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    sink.failing = False
    retried = await http.post(receivers.http.url, content=cloudevent(fresh()), headers=CE_HEADERS)
    assert retried.json()["outcome"] == "incident"


async def test_a_receiver_without_a_credential_does_not_listen(sink: RecordingSink) -> None:
    """Settings that slipped past validation (built in code, an old file) still do not start a
    receiver anyone on the host could feed: the servers refuse before binding."""
    settings = NvSentinelSettings.model_construct(enabled=True, grpc_port=0, http_port=0)
    with pytest.raises(ValueError, match="credential"):
        async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab"):
            pass
    assert sink.anomalies == []


async def test_an_unauthenticated_loopback_post_is_refused_and_opens_nothing(tmp_path: Path,
                                                                             sink: RecordingSink) -> None:
    """The issue's case: gRPC uses TokenReview, the HTTP side was left open to every local account.
    Now the HTTP side needs its own credential, and a loopback POST without one is a 401."""
    secret = "exporter-secret-0123456789"
    settings = NvSentinelSettings(enabled=True, grpc_enabled=False, http_port=0, oauth_clients={"nvsentinel": secret})
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        assert running.http is not None and running.http.url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(running.http.url, content=cloudevent(fresh()),
                                         headers={"Content-Type": "application/cloudevents+json"})
            forged = await client.post(running.http.url, content=cloudevent(fresh()),
                                       headers={"Content-Type": "application/cloudevents+json",
                                                "Authorization": "Bearer nvsentinel.99999999999." + "0" * 64})
    assert response.status_code == 401 and forged.status_code == 401
    assert sink.anomalies == []


async def test_the_exporter_gets_a_token_by_client_credentials_and_posts_with_it(sink: RecordingSink) -> None:
    """NVSentinel's event exporter always authenticates with OAuth 2.0 client credentials: goodput is
    its token endpoint as well as its sink."""
    secret = "exporter-secret-0123456789"
    settings = NvSentinelSettings(enabled=True, grpc_enabled=False, http_port=0, oauth_clients={"nvsentinel": secret})
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        assert running.http is not None
        token_url, url = running.http.token_url, running.http.url
        async with httpx.AsyncClient(timeout=10) as client:
            unauthenticated = await client.post(url, content=cloudevent(fresh()), headers=CE_HEADERS)
            assert unauthenticated.status_code == 401  # a static token is not one either
            granted = await client.post(token_url, data={"grant_type": "client_credentials", "scope": "events:write"},
                                        auth=("nvsentinel", secret))
            assert granted.status_code == 200 and granted.headers["Cache-Control"] == "no-store"
            answer = granted.json()
            assert answer["token_type"] == "Bearer" and answer["expires_in"] == 3600
            assert answer["scope"] == "events:write" and secret not in answer["access_token"]
            bearer = {"Authorization": f"Bearer {answer['access_token']}",
                      "Content-Type": "application/cloudevents+json"}
            response = await client.post(url, content=cloudevent(fresh()), headers=bearer)
            assert response.status_code == 200 and response.json()["outcome"] == "incident"
            # the client secret in the form instead of HTTP Basic
            posted = await client.post(token_url, data={"grant_type": "client_credentials", "client_id": "nvsentinel",
                                                        "client_secret": secret})
            assert posted.status_code == 200
            refused = await client.post(token_url, data={"grant_type": "client_credentials"},
                                        auth=("nvsentinel", "not-the-secret-at-all"))
            assert refused.status_code == 401 and refused.json() == {"error": "invalid_client"}
            wrong_grant = await client.post(token_url, data={"grant_type": "password"}, auth=("nvsentinel", secret))
            assert wrong_grant.status_code == 400 and wrong_grant.json()["error"] == "unsupported_grant_type"
            huge = await client.post(token_url, content=b"a=" + b"x" * 10_000,
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert huge.status_code == 413
            forged = answer["access_token"][:-4] + "0000"
            rejected = await client.post(url, content=cloudevent(fresh()),
                                         headers={**bearer, "Authorization": f"Bearer {forged}"})
            assert rejected.status_code == 401
    assert [a.job_id for a in sink.anomalies] == ["1001"]


SA_USER = "system:serviceaccount:nvsentinel:platform-connector"


@asynccontextmanager
async def kubernetes_api(reviews: list[dict[str, Any]], *, down: bool = False) -> AsyncIterator[str]:
    """The TokenReview endpoint of a Kubernetes API server, as far as goodput uses it."""
    tokens = {"projected-sa-token-of-the-connector": SA_USER, "projected-sa-token-of-someone-else":
              "system:serviceaccount:default:default"}

    async def review(request: Request) -> JSONResponse:
        if down:
            return JSONResponse({"kind": "Status", "code": 503}, status_code=503)
        assert request.headers["Authorization"] == "Bearer goodput-own-sa-token"
        body = await request.json()
        reviews.append(body)
        user = tokens.get(body["spec"]["token"])
        status: dict[str, Any] = {"authenticated": True, "user": {"username": user},
                                  "audiences": body["spec"].get("audiences", [])} if user else {
            "authenticated": False, "error": "invalid bearer token"}
        return JSONResponse({**body, "status": status}, status_code=201)

    app = application([Route("/apis/authentication.k8s.io/v1/tokenreviews", review, methods=["POST"])])
    listener = Listener(app, "Kubernetes API", "127.0.0.1", 0)
    await listener.start()
    try:
        yield listener.url
    finally:
        await listener.stop()


async def test_projected_serviceaccount_tokens_are_checked_by_tokenreview(tmp_path: Path,
                                                                         sink: RecordingSink) -> None:
    """NVSentinel's grpc sink sends a projected ServiceAccount token (its `tokenPath`); goodput asks the
    API server's TokenReview who it belongs to, and caches the answer."""
    (tmp_path / "sa-token").write_text("goodput-own-sa-token\n")
    reviews: list[dict[str, Any]] = []
    async with kubernetes_api(reviews) as api:
        settings = NvSentinelSettings(enabled=True, grpc_port=0, http_enabled=False, token_review={
            "enabled": True, "api_url": api, "allow_http": True, "token_file": tmp_path / "sa-token",
            "allowed_users": [SA_USER], "audiences": ["goodput"]})
        async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
            assert running.grpc is not None
            async with grpc.aio.insecure_channel(running.grpc.target) as open_channel:
                connector = (("authorization", "Bearer projected-sa-token-of-the-connector"),)
                await caller(open_channel)(batch(xid_proto("node1")), metadata=connector, timeout=10)
                await caller(open_channel)(batch(xid_proto("node3")), metadata=connector, timeout=10)
                for metadata in ((("authorization", "Bearer projected-sa-token-of-someone-else"),),
                                 (("authorization", "Bearer forged"),), ()):
                    assert await status_of(caller(open_channel)(batch(xid_proto("node5")), metadata=metadata,
                                                                timeout=10)) is grpc.StatusCode.UNAUTHENTICATED
    assert [a.job_id for a in sink.anomalies] == ["1001", "1002"]
    assert len(reviews) == 3  # the connector's token was reviewed once, then cached
    assert reviews[0]["spec"] == {"token": "projected-sa-token-of-the-connector", "audiences": ["goodput"]}


async def test_an_unreachable_api_server_asks_nvsentinel_to_retry(tmp_path: Path, sink: RecordingSink) -> None:
    (tmp_path / "sa-token").write_text("goodput-own-sa-token")
    async with kubernetes_api([], down=True) as api:
        settings = NvSentinelSettings(enabled=True, grpc_port=0, http_enabled=False, token_review={
            "enabled": True, "api_url": api, "allow_http": True, "token_file": tmp_path / "sa-token",
            "allowed_users": [SA_USER]})
        async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
            assert running.grpc is not None
            async with grpc.aio.insecure_channel(running.grpc.target) as open_channel:
                metadata = (("authorization", "Bearer projected-sa-token-of-the-connector"),)
                assert await status_of(caller(open_channel)(batch(xid_proto()), metadata=metadata, timeout=10)) is (
                    grpc.StatusCode.UNAVAILABLE)
    assert sink.anomalies == []


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


async def test_receivers_stop_cleanly(sink: RecordingSink) -> None:
    settings = NvSentinelSettings(enabled=True, grpc_port=0, http_port=0, tokens=(TOKEN,))
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        assert running.grpc is not None
        target = running.grpc.target
    async with grpc.aio.insecure_channel(target) as closed:
        with pytest.raises(grpc.aio.AioRpcError):
            await caller(closed)(batch(xid_proto()), metadata=AUTH, timeout=1)
    await asyncio.sleep(0)


async def test_an_oauth_client_secret_from_a_file_works_like_one_in_the_settings(tmp_path: Path,
                                                                                 sink: RecordingSink) -> None:
    """The Helm chart's way (issue #26): the secret in a mounted Secret's file, never in the ConfigMap."""
    secret = "exporter-secret-from-a-file-0123"
    (tmp_path / "client-secret").write_text(secret + "\n")
    settings = NvSentinelSettings(enabled=True, grpc_enabled=False, http_port=0,
                                  oauth_client_files={"nvsentinel": tmp_path / "client-secret"})
    async with serve_nvsentinel(settings, FakeScheduler(), sink, "lab") as running:
        assert running.http is not None and "OAuth token URL" in running.describe()
        async with httpx.AsyncClient(timeout=10) as client:
            granted = await client.post(running.http.token_url, data={"grant_type": "client_credentials"},
                                        auth=("nvsentinel", secret))
            bearer = {"Authorization": f"Bearer {granted.json()['access_token']}",
                      "Content-Type": "application/cloudevents+json"}
            response = await client.post(running.http.url, content=cloudevent(fresh()), headers=bearer)
    assert response.status_code == 200 and [a.job_id for a in sink.anomalies] == ["1001"]
