"""The agents' GPU feed over the real listener (uvicorn on loopback): a node reports only for itself,
hostile bodies are refused with typed errors, and what arrives explains stragglers and hangs."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import httpx
import pytest
from rich.console import Console
from temporalio.client import Client

from activities.adapters.gpu_feed import GpuFeedSender
from activities.adapters.node_agent import NodeAgent
from goodput.config import Settings
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.detect.gpu_feed import MAX_REPORT_BYTES, GpuReport, GpuSampleStore
from goodput.detect.node_liveness import LivenessConfig, heartbeat_token
from goodput.detect.watch import OptInRule
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category
from goodput.scheduler import JobInfo, SchedulerError
from tests.fakes.gpu import FakeGpuProbe, healthy_gpus
from tests.fakes.sink import RecordingSink
from tests.helpers import eventually
from workers.gpu_feed import GPU_SAMPLES_PATH, GpuEvidenceSink, gpu_store_for
from workers.liveness import HeartbeatServer, serve_liveness
from workers.serve import service_extras

pytestmark = pytest.mark.timeout(60)
SECRET = b"k" * 40
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[HeartbeatServer, GpuSampleStore]]:
    """Through `serve_liveness`, as `goodput up` wires it: the feed shares the heartbeat listener."""
    secret = tmp_path / "liveness.secret"
    secret.write_bytes(SECRET)
    store = GpuSampleStore(window=4, max_age_s=600, max_nodes=3)
    config = LivenessConfig(enabled=True, port=0, secret_file=secret)
    async with serve_liveness(config, FakeScheduler(demo_cluster()), RecordingSink(), "c1", OptInRule(),
                              gpu_samples=store) as server:
        yield server, store


def report(node: str = "node3", cluster: str = "c1", **slow: object) -> dict[str, object]:
    gpus = [s.model_copy(update=slow) if s.index == 2 else s for s in healthy_gpus(node)]
    return GpuReport.of(cluster, node, gpus).model_dump(mode="json", exclude_none=True)


async def post(server: HeartbeatServer, body: object, token: str | None, *,
               content_type: str = "application/json") -> tuple[int, dict[str, object]]:
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(timeout=10, trust_env=False) as session:
        response = await session.post(f"{server.url}{GPU_SAMPLES_PATH}", content=data, headers=headers)
        return response.status_code, response.json()


def token(node: str = "node3", cluster: str = "c1") -> str:
    return heartbeat_token(SECRET, cluster, node)


async def test_a_node_reports_its_gpus_with_its_own_token(served: tuple[HeartbeatServer, GpuSampleStore]) -> None:
    server, store = served
    status, body = await post(server, report(sm_clock_mhz=1300.0, clock_event_mask=0x40), token())
    assert (status, body) == (200, {"node": "node3", "gpus": 8})
    ((_, samples),) = store.reports("node3", datetime.now(UTC))
    assert len(samples) == 8 and all(s.node == "node3" for s in samples)
    assert samples[2].sm_clock_mhz == 1300.0 and samples[2].clock_event_reasons == ("hw-thermal-slowdown",)


async def test_a_token_speaks_only_for_its_node(served: tuple[HeartbeatServer, GpuSampleStore]) -> None:
    server, store = served
    assert (await post(server, report("node3"), token("node4")))[0] == 401  # node4 cannot report for node3
    assert (await post(server, report("node3"), None))[0] == 401
    assert (await post(server, report("node3"), "x" * 64))[0] == 401
    assert (await post(server, report("node3", "c2"), token("node3", "c2")))[0] == 401
    assert (await post(server, report("node3"), heartbeat_token(b"x" * 40, "c1", "node3")))[0] == 401
    assert len(store) == 0


async def test_hostile_bodies_are_refused_with_typed_errors(served: tuple[HeartbeatServer, GpuSampleStore]) -> None:
    server, store = served
    cases: list[tuple[object, str, int]] = [
        (b"{", "application/json", 400),
        (b"[1]", "application/json", 400),
        (b"[" * 5000 + b"]" * 5000, "application/json", 400),
        ({**report(), "node": "node3; rm -rf /"}, "application/json", 400),
        ({**report(), "extra": 1}, "application/json", 400),
        ({**report(), "gpus": [{"utilisation_pct": 1e9}]}, "application/json", 400),
        ({**report(), "gpus": [{"utilisation_pct": "NaN"}]}, "application/json", 400),
        (report(), "text/plain", 415),
        (b'{"cluster": "c1", "node": "node3", "gpus": []' + b" " * MAX_REPORT_BYTES + b"}", "application/json", 413),
    ]
    for body, kind, status in cases:
        code, answer = await post(server, body, token(), content_type=kind)
        assert code == status and isinstance(answer.get("error"), str), (body if isinstance(body, dict) else kind)
        assert "1000000000" not in str(answer["error"])  # what was sent is not echoed back
    assert len(store) == 0


async def test_a_chunked_body_past_the_limit_is_refused(served: tuple[HeartbeatServer, GpuSampleStore]) -> None:
    server, store = served

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"cluster": "c1", "node": "node3", "gpus": ['
        for _ in range(MAX_REPORT_BYTES // 1000 + 2):
            yield b" " * 1000

    async with httpx.AsyncClient(timeout=10, trust_env=False) as session:
        response = await session.post(f"{server.url}{GPU_SAMPLES_PATH}", content=chunks(), headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {token()}"})
    assert response.status_code == 413 and len(store) == 0


async def test_a_full_store_refuses_new_nodes(served: tuple[HeartbeatServer, GpuSampleStore]) -> None:
    server, store = served
    for node in ("node1", "node2", "node3"):
        assert (await post(server, report(node), token(node)))[0] == 200
    status, body = await post(server, report("node4"), token("node4"))
    assert status == 503 and "too many nodes" in str(body["error"])
    assert (await post(server, report("node1"), token("node1")))[0] == 200 and len(store) == 3


async def test_the_agent_feeds_only_fresh_samples(served: tuple[HeartbeatServer, GpuSampleStore]) -> None:
    """The agent's loop sends each tick's samples once; a probe that stops answering sends nothing."""
    server, store = served
    probe = FakeGpuProbe()
    probe.set_samples(healthy_gpus("node3"))
    feed = GpuFeedSender(server.url, token(), cluster="c1", node="node3", interval_s=0.05)
    agent = NodeAgent("node3", "c1", probe, None, FakeScheduler(demo_cluster()), RecordingSink(), OptInRule(),
                      interval_s=0.05, gpu_feed=feed)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    # The sender counts a report once its answer is read; the store has it a moment before, so a
    # stop set on the store's count can cancel the second answer in flight (seen once in CI).
    await eventually(lambda: (feed.sent, len(store.reports("node3", datetime.now(UTC)))),
                     lambda counts: min(counts) >= 2, timeout=20, interval=0.05, what="two reports from node3")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert feed.errors == 0 and feed.sent >= 2
    async with httpx.AsyncClient(timeout=10, trust_env=False) as session:
        assert not await feed.send(session, lambda: (7, []))  # nothing read: nothing sent
        assert await feed.send(session, lambda: (7, healthy_gpus("node3")))
        assert not await feed.send(session, lambda: (7, healthy_gpus("node3")))  # the same tick again


class Placed(FakeScheduler):
    def __init__(self, nodes: Sequence[str], *, fail: bool = False) -> None:
        super().__init__(demo_cluster(node_count=8))
        self.fail = fail
        self.add_job(self.snapshot().jobs["1002"].model_copy(update={"job_id": "42", "nodes": tuple(nodes)}))

    async def get_job(self, job_id: str) -> JobInfo:
        if self.fail:
            raise SchedulerError("slurmctld is not answering")
        return await super().get_job(job_id)


def straggler(nodes: tuple[str, ...] = ()) -> Anomaly:
    return Anomaly(id="log-s", source=AnomalySource.LOG, kind=AnomalyKind.STRAGGLER, job_id="42", nodes=nodes,
                   evidence=["rank 9 is 30% slower"], category=Category.STRAGGLER, observed_at=NOW, detected_at=NOW)


async def test_a_straggler_reaching_the_incident_names_the_gpu_and_why() -> None:
    """Samples of node5..node8, the job on node5..node7 by Slurm: node8's slower GPU is not the job's."""
    clock = Clock(NOW)
    store = GpuSampleStore(window=4, max_age_s=120, max_nodes=10)
    for node in ("node5", "node6", "node7", "node8"):
        gpus = healthy_gpus(node)
        if node in ("node6", "node8"):
            gpus[3] = gpus[3].model_copy(update={"sm_clock_mhz": 1250.0, "clock_event_reasons": ("hw-slowdown",)})
        store.put(node, NOW - timedelta(seconds=5), gpus)
    inner = RecordingSink()
    sink = GpuEvidenceSink(inner, store, Placed(("node5", "node6", "node7")), clock=clock)
    await sink.submit(straggler())
    (sent,) = inner.anomalies
    assert sent.id == "log-s" and sent.nodes == ("node6",) and sent.gpus == ("GPU-node6-0003",)
    assert any("node6/gpu3" in line and "sm clock 1250 MHz" in line for line in sent.evidence)
    assert any("hw-slowdown" in line for line in sent.evidence) and sink.explained == 1
    # A controller that does not answer costs the explanation only.
    failing = GpuEvidenceSink(inner, store, Placed(("node5",), fail=True), clock=clock)
    await failing.submit(straggler(("node6",)))
    assert inner.anomalies[-1] == straggler(("node6",)) and failing.errors == 1
    # The job moved on to another attempt: its nodes now are not those the anomaly saw.
    moved = Placed(("node5", "node6", "node7"))
    moved.add_job((await moved.get_job("42")).model_copy(update={"restart_count": 1}))
    await GpuEvidenceSink(inner, store, moved, clock=clock).submit(straggler(("node6",)))
    assert inner.anomalies[-1] == straggler(("node6",))
    # Reports that aged out explain nothing.
    clock.now = NOW + timedelta(minutes=10)
    await sink.submit(straggler(("node6",)))
    assert inner.anomalies[-1] == straggler(("node6",))


async def test_the_service_serves_the_feed_beside_the_heartbeats(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """As `goodput up` and `goodput worker` wire it: with [liveness] on there is one store, the feed
    fills it on the heartbeat listener; with it off there is none (and no endpoint)."""
    monkeypatch.setenv("GOODPUT_CONFIG", str(tmp_path / "none.toml"))
    secret = tmp_path / "liveness.secret"
    secret.write_bytes(SECRET)
    settings = Settings(cluster="c1", watch=False, data_dir=tmp_path / "data", liveness=LivenessConfig(
        enabled=True, port=0, secret_file=secret))
    assert gpu_store_for(Settings(cluster="c1", data_dir=tmp_path / "data").liveness) is None
    store = gpu_store_for(settings.liveness)
    assert store is not None and (store.window, store.max_nodes) == (12, 2048)
    out = io.StringIO()
    async with service_extras(settings, cast(Client, None), Console(file=out, width=400), gpu_samples=store):
        url = out.getvalue().split("agents' heartbeats at ")[1].split()[0]
        async with httpx.AsyncClient(timeout=10, trust_env=False) as session:
            response = await session.post(f"{url}{GPU_SAMPLES_PATH}", json=report(), headers={
                "Authorization": f"Bearer {token()}"})
    assert response.status_code == 200, response.text
    assert len(store.reports("node3", datetime.now(UTC))) == 1
