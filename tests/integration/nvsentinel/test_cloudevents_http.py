"""The NVSentinel HTTP receiver, posted CloudEvents by httpx: an incident, the dedup window it shares
with gRPC, bad requests answered 4xx with a reason, a huge chunked body cut off, and a failing sink
answered 503 with Retry-After."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc
import httpx
import pytest

from tests.fakes.sink import RecordingSink
from tests.integration.nvsentinel.cases import (
    AUTH,
    CE_HEADERS,
    UUID,
    batch,
    caller,
    cloudevent,
    fresh,
    xid_json,
    xid_proto,
)
from workers.nvsentinel.server import NvSentinelReceivers

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

