"""The real push server on 127.0.0.1 (ephemeral port), spoken to over real HTTP with httpx."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from goodput.detect.push import PushConfig
from goodput.models import Anomaly
from tests.fakes.sink import RecordingSink
from workers import push as push_server
from workers.push import PushServer, serve_push

TOKEN = "integration-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"}
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def ndjson(*records: object) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def fluent_bit_body(host: str = "node3") -> bytes:
    """What `[OUTPUT] name http, format json_lines` sends after a tail input and a job-id parser."""
    return ndjson({"date": 1764417600.0001, "log": "iteration 10/ 100 | loss 2.3", "file": "/slurm/slurm-42.out",
                   "job_id": "42", "hostname": host},
                  {"date": 1764417600.0002, "log": XID, "file": "/slurm/slurm-42.out", "job_id": "42",
                   "hostname": host})


def vector_body() -> bytes:
    """What Vector's `http` sink sends with `codec = "json"` and newline-delimited framing."""
    return ndjson({"file": "/slurm/slurm-77.out", "host": "gpu-07", "message": "step 1",
                   "source_type": "file", "timestamp": "2026-11-29T12:00:00.123456789Z", "job_id": "77"},
                  {"file": "/slurm/slurm-77.out", "host": "gpu-07", "message": XID, "source_type": "file",
                   "timestamp": "2026-11-29T12:00:00.223456789Z", "job_id": "77", "restart_count": 1})


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest_asyncio.fixture
async def server(sink: RecordingSink) -> AsyncIterator[PushServer]:
    config = PushConfig(enabled=True, port=0, tokens=(TOKEN,), max_body_bytes=64 << 10)
    async with serve_push(config, sink, "lab") as running:
        yield running


@pytest_asyncio.fixture
async def http(server: PushServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        yield client


async def test_binds_loopback_on_an_ephemeral_port(server: PushServer, http: httpx.AsyncClient) -> None:
    assert server.url.startswith("http://127.0.0.1:") and server.port > 0
    response = await http.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert response.headers["Server"] == "goodput"  # no software versions for scanners


async def test_fluent_bit_batch_becomes_an_anomaly_in_the_sink(http: httpx.AsyncClient, sink: RecordingSink) -> None:
    response = await http.post("/v1/logs", content=fluent_bit_body(),
                               headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 200
    assert response.json() == {"accepted": 2, "rejected": [], "rejected_total": 0, "anomalies": 1}
    [anomaly] = sink.anomalies
    assert (anomaly.cluster, anomaly.job_id, anomaly.nodes) == ("lab", "42", ("node3",))
    assert "xid-79" in anomaly.signature_ids


async def test_vector_batch_with_x_goodput_token(http: httpx.AsyncClient, sink: RecordingSink) -> None:
    response = await http.post("/v1/logs", content=vector_body(),
                               headers={"X-Goodput-Token": TOKEN, "Content-Type": "application/x-ndjson"})
    assert response.status_code == 200 and response.json()["anomalies"] == 1
    [anomaly] = sink.anomalies
    assert (anomaly.job_id, anomaly.job_attempt, anomaly.nodes) == ("77", 1, ("gpu-07",))


async def test_a_json_array_and_a_gzip_body(http: httpx.AsyncClient, sink: RecordingSink) -> None:
    array = json.dumps([{"log": XID, "job_id": "5", "host": "n5"}]).encode()
    response = await http.post("/v1/logs", content=array, headers={**AUTH, "Content-Type": "application/json"})
    assert response.json()["accepted"] == 1
    response = await http.post("/v1/logs", content=gzip.compress(fluent_bit_body("node4")),
                               headers={**AUTH, "Content-Encoding": "gzip"})
    assert response.status_code == 200 and response.json()["anomalies"] == 1
    assert [a.nodes for a in sink.anomalies] == [("n5",), ("node4",)]


async def test_a_retried_batch_carries_the_same_anomaly_id(http: httpx.AsyncClient, sink: RecordingSink) -> None:
    for _ in range(2):
        assert (await http.post("/v1/logs", content=fluent_bit_body(), headers=AUTH)).status_code == 200
    first, second = sink.anomalies
    assert first.id == second.id


async def test_sink_failure_is_503_with_retry_after_and_the_retry_lands(
        http: httpx.AsyncClient, sink: RecordingSink) -> None:
    sink.failing = True
    response = await http.post("/v1/logs", content=fluent_bit_body(), headers=AUTH)
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    assert "retry" in response.json()["error"]
    sink.failing = False
    assert (await http.post("/v1/logs", content=fluent_bit_body(), headers=AUTH)).status_code == 200
    assert len(sink.anomalies) == 1


async def test_a_hanging_sink_is_also_503(http: httpx.AsyncClient, sink: RecordingSink,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(push_server, "SUBMIT_TIMEOUT_S", 0.05)
    never = asyncio.Event()

    async def hang(anomaly: Anomaly) -> None:
        await never.wait()

    monkeypatch.setattr(sink, "submit", hang)
    response = await http.post("/v1/logs", content=fluent_bit_body(), headers=AUTH)
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": f"Basic {TOKEN}"},
    {"X-Goodput-Token": "nope"}, {"Authorization": TOKEN},
])
async def test_missing_or_wrong_token_is_401(http: httpx.AsyncClient, sink: RecordingSink,
                                             headers: dict[str, str]) -> None:
    response = await http.post("/v1/logs", content=fluent_bit_body(),
                               headers={"Content-Type": "application/json", **headers})
    assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "token" in response.json()["error"] and sink.anomalies == []


async def test_wrong_content_type_is_415(http: httpx.AsyncClient) -> None:
    for content_type in ("application/x-www-form-urlencoded", "application/octet-stream", "text/html"):
        response = await http.post("/v1/logs", content=fluent_bit_body(),
                                   headers={**AUTH, "Content-Type": content_type})
        assert response.status_code == 415 and "application/x-ndjson" in response.json()["error"]
    headers = {"Authorization": AUTH["Authorization"], "Content-Type": "text/plain; charset=utf-8"}
    assert (await http.post("/v1/logs", content=fluent_bit_body(), headers=headers)).status_code == 200


async def test_too_large_is_413_with_or_without_content_length(http: httpx.AsyncClient) -> None:
    big = ndjson({"log": "x" * (100 << 10), "job_id": "1"})
    response = await http.post("/v1/logs", content=big, headers=AUTH)
    assert response.status_code == 413 and "limit 65536" in response.json()["error"]

    async def chunks() -> AsyncIterator[bytes]:  # chunked transfer: no Content-Length to check first
        for _ in range(100):
            yield b'{"log": "' + b"y" * 4096 + b'", "job_id": "1"}\n'

    response = await http.post("/v1/logs", content=chunks(), headers=AUTH)
    assert response.status_code == 413 and "65536" in response.json()["error"]


async def test_a_gzip_body_is_bounded_after_decompression(http: httpx.AsyncClient) -> None:
    bomb = gzip.compress(ndjson({"log": "z" * (1 << 20), "job_id": "1"}))
    assert len(bomb) < 64 << 10
    response = await http.post("/v1/logs", content=bomb, headers={**AUTH, "Content-Encoding": "gzip"})
    assert response.status_code == 413


async def test_not_json_is_400_naming_the_line(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/logs", content=b"\n\n\x89PNG\x00\xff garbage\n", headers=AUTH)
    assert response.status_code == 400
    assert "line 3" in response.json()["error"] and "not JSON" in response.json()["error"]


async def test_bad_records_are_listed_and_the_good_ones_kept(http: httpx.AsyncClient, sink: RecordingSink) -> None:
    body = ndjson({"log": "x", "job_id": "1;rm -rf /"}, {"log": XID, "job_id": "8", "host": "n8"}, {"job_id": "8"})
    response = await http.post("/v1/logs", content=body, headers=AUTH)
    assert response.status_code == 200
    result = response.json()
    assert result["accepted"] == 1 and result["anomalies"] == 1 and result["rejected_total"] == 2
    assert [r["line"] for r in result["rejected"]] == [1, 3] and "invalid job id" in result["rejected"][0]["reason"]
    assert [a.job_id for a in sink.anomalies] == ["8"]


async def test_a_5000_digit_rank_line_is_rejected_alone_and_the_other_jobs_are_judged(
        http: httpx.AsyncClient, sink: RecordingSink) -> None:
    """Before: int() of the rank raised inside the detector and the whole batch was an HTTP 500,
    which the shipper retries forever, so jobs 41 and 43 never got their anomalies."""
    huge = "9" * 5000
    body = ndjson({"log": XID, "job_id": "41", "host": "n1"},
                  {"log": f"[rank0]: ranks [{huge}] are the lagging ranks that caused this timeout.",
                   "job_id": "42", "host": "n2"},
                  {"log": "[rank3]: torch.OutOfMemoryError: CUDA out of memory.", "job_id": "43", "host": "n3"})
    body += b'{"log": "step 1", "job_id": "44", "host": "n4", "rank": ' + huge.encode() + b"}\n"
    response = await http.post("/v1/logs", content=body, headers=AUTH)
    assert response.status_code == 200
    result = response.json()
    assert (result["accepted"], result["anomalies"], result["rejected_total"]) == (2, 2, 2)
    assert [r["line"] for r in result["rejected"]] == [2, 4]
    assert "more than 999 digits" in result["rejected"][0]["reason"]
    assert "5000-character number" in result["rejected"][1]["reason"]
    assert sorted((a.job_id, a.category) for a in sink.anomalies) == [("41", "gpu-hardware"), ("43", "oom")]


async def test_a_stream_that_cannot_be_judged_is_rejected_not_a_500(sink: RecordingSink) -> None:
    """The last guard: whatever fails inside one job's detector costs that job only."""
    from goodput.detect.push import PushRouter
    from goodput.diagnose.signatures import Catalogue, Match, default_catalogue
    from goodput.diagnose.signatures.prefixes import RepeatedPrefix

    class Exploding(Catalogue):
        def match_line(self, line: str, line_no: int = 0, layout: RepeatedPrefix | None = None) -> list[Match]:
            if "explode" in line:
                raise RuntimeError("a detector bug")
            return super().match_line(line, line_no, layout)

    packaged = default_catalogue()
    config = PushConfig(enabled=True, port=0, tokens=(TOKEN,))
    router = PushRouter(config, catalogue=Exploding(packaged.signatures, packaged.version))
    body = ndjson({"log": "explode", "job_id": "42", "host": "n2"}, {"log": XID, "job_id": "41", "host": "n1"})
    async with serve_push(config, sink, "lab", router=router) as running, \
            httpx.AsyncClient(base_url=running.url, timeout=10) as client:
        response = await client.post("/v1/logs", content=body, headers=AUTH)
    assert response.status_code == 200
    result = response.json()
    assert (result["accepted"], result["anomalies"], result["rejected_total"]) == (1, 1, 1)
    assert result["rejected"][0]["line"] == 1 and "job 42" in result["rejected"][0]["reason"]
    assert [a.job_id for a in sink.anomalies] == ["41"]


async def test_other_methods_and_paths(http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/logs", headers=AUTH)
    assert response.status_code == 405 and "POST" in response.headers["Allow"]
    assert "error" in response.json()
    assert (await http.put("/v1/logs", content=b"{}", headers=AUTH)).status_code == 405
    assert (await http.post("/v2/logs", content=b"{}", headers=AUTH)).status_code == 404


async def test_stop_releases_the_port(sink: RecordingSink) -> None:
    server = PushServer(PushConfig(port=0), sink, "lab")
    await server.start()
    url = server.url
    await server.stop()
    with pytest.raises(RuntimeError):
        _ = server.port
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"{url}/healthz")
