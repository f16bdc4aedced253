"""Heartbeats over the real HTTP endpoint: only a node's own token keeps that node alive."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from activities.adapters.heartbeat import HeartbeatSender, HeartbeatTokenError, read_token
from activities.adapters.node_agent import run_agent
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.detect.node_agent import AgentConfig
from goodput.detect.node_liveness import LivenessConfig, LivenessTracker, heartbeat_token
from goodput.detect.watch import OptInRule
from goodput.scheduler import JobInfo, NodeInfo, SchedulerError
from tests.fakes.sink import RecordingSink
from tests.helpers import eventually
from workers.liveness import HeartbeatServer, LivenessMonitor, LivenessSecretError, read_secret

pytestmark = pytest.mark.timeout(30)
SECRET = b"k" * 40
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture
async def served() -> AsyncIterator[tuple[HeartbeatServer, LivenessTracker]]:
    config = LivenessConfig(enabled=True, port=0)
    tracker = LivenessTracker(config)
    server = HeartbeatServer(config, tracker, "c1", SECRET, clock=lambda: NOW)
    await server.start()
    try:
        yield server, tracker
    finally:
        await server.stop()


async def post(server: HeartbeatServer, body: object, token: str | None, *,
               content_type: str = "application/json") -> tuple[int, str]:
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(timeout=10) as session:
        response = await session.post(f"{server.url}/v1/heartbeat", content=data, headers=headers)
        return response.status_code, response.text


async def test_a_node_beats_with_its_own_token(served: tuple[HeartbeatServer, LivenessTracker]) -> None:
    server, tracker = served
    sender = HeartbeatSender(server.url, heartbeat_token(SECRET, "c1", "node3"), cluster="c1", node="node3",
                             interval_s=2.0)
    async with httpx.AsyncClient(timeout=10) as session:
        assert await sender.beat(session)
    assert tracker.last_seen("node3") == NOW and sender.sent == 1


async def test_a_token_speaks_only_for_its_node(served: tuple[HeartbeatServer, LivenessTracker]) -> None:
    server, tracker = served
    node4 = heartbeat_token(SECRET, "c1", "node4")
    body = {"cluster": "c1", "node": "node3", "interval_s": 2.0}
    assert (await post(server, body, node4))[0] == 401  # node4 cannot keep node3 alive
    assert (await post(server, body, None))[0] == 401
    assert (await post(server, body, heartbeat_token(b"x" * 40, "c1", "node3")))[0] == 401
    assert (await post(server, {**body, "cluster": "c2"}, heartbeat_token(SECRET, "c2", "node3")))[0] == 401
    assert tracker.last_seen("node3") is None and len(tracker) == 0
    assert server.rejected == 4


@pytest.mark.parametrize("body, content_type, status", [
    (b"{", "application/json", 400),
    (b"[1]", "application/json", 400),
    ({"cluster": "c1", "node": "node3; rm -rf /", "interval_s": 2.0}, "application/json", 400),
    ({"cluster": "c1", "node": "node3", "interval_s": 1e9}, "application/json", 400),
    ({"cluster": "c1", "node": "node3", "interval_s": "nan"}, "application/json", 400),
    (b'{"cluster": "c1", "node": "node3", "interval_s": 1' + b"0" * 400 + b"}", "application/json", 400),
    ({"cluster": "c1", "node": "node3", "interval_s": 2.0}, "text/plain", 415),
    (b"{" + b" " * 4096 + b"}", "application/json", 413),
])
async def test_bad_heartbeats_are_refused_and_change_nothing(served: tuple[HeartbeatServer, LivenessTracker],
                                                             body: object, content_type: str, status: int) -> None:
    server, tracker = served
    code, text = await post(server, body, heartbeat_token(SECRET, "c1", "node3"), content_type=content_type)
    assert code == status, text
    assert len(tracker) == 0


async def test_the_agents_loop_keeps_beating_through_refusals(served: tuple[HeartbeatServer, LivenessTracker]) -> None:
    server, tracker = served
    wrong = HeartbeatSender(server.url, heartbeat_token(SECRET, "c1", "node9"), cluster="c1", node="node3",
                            interval_s=0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(wrong.run(stop))
    await eventually(lambda: wrong.errors, lambda n: n >= 2, timeout=10, interval=0.05)
    stop.set()
    await task
    assert wrong.sent == 0 and len(tracker) == 0


def test_secrets_and_tokens_are_checked_at_start(tmp_path: Path) -> None:
    with pytest.raises(LivenessSecretError, match="secret_file"):
        read_secret(None)
    short = tmp_path / "short"
    short.write_bytes(b"x" * 10)
    with pytest.raises(LivenessSecretError, match="at least 32"):
        read_secret(short)
    with pytest.raises(LivenessSecretError, match="cannot read"):
        read_secret(tmp_path / "absent")
    empty = tmp_path / "token"
    empty.write_text("\n")
    with pytest.raises(HeartbeatTokenError, match="empty"):
        read_token(empty)


class HungScheduler(FakeScheduler):
    """A controller that never answers: the agent's tick waits on it, its heartbeat must not."""

    async def list_jobs(self) -> Sequence[JobInfo]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_run_agent_heartbeats_for_its_node_while_its_tick_waits(
        served: tuple[HeartbeatServer, LivenessTracker], tmp_path: Path) -> None:
    server, tracker = served
    token = tmp_path / "heartbeat.token"
    token.write_text(heartbeat_token(SECRET, "c1", "node3") + "\n")
    config = AgentConfig(node="node3", probe="none", interval_s=0.05, heartbeat_url=server.url,
                         heartbeat_token_file=token, heartbeat_interval_s=0.1, jobs_from="controller")
    stop = asyncio.Event()
    task = asyncio.create_task(run_agent(config, "c1", HungScheduler(demo_cluster()), RecordingSink(), stop))
    await eventually(lambda: tracker.last_seen("node3"), timeout=10, interval=0.05, what="node3's heartbeat")
    stop.set()
    await asyncio.wait_for(task, 10)
    with pytest.raises(ValueError, match="heartbeat_token_file"):
        await run_agent(config.model_copy(update={"heartbeat_token_file": None}), "c1", FakeScheduler(),
                        RecordingSink(), stop)


def test_agent_token_prints_the_nodes_token(tmp_path: Path) -> None:
    secret = tmp_path / "liveness.secret"
    secret.write_bytes(SECRET + b"\n")
    env = {**os.environ, "GOODPUT_CONFIG": str(tmp_path / "none.toml"), "GOODPUT_CLUSTER": "c1",
           "GOODPUT_LIVENESS__SECRET_FILE": str(secret)}
    goodput = [sys.executable, "-c", "from workers.main import main; main()", "agent-token"]
    done = subprocess.run([*goodput, "--node", "node3"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == heartbeat_token(SECRET, "c1", "node3")
    refused = subprocess.run([*goodput, "--node", "node3;x"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and not refused.stdout


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def test_the_monitor_opens_nothing_in_a_blip_nor_after_a_restart(tmp_path: Path) -> None:
    """Three of four agents silent at once, each job's output stopped too (the head node cannot see
    the shared file system either): no node loss. Heard again, nobody is suspect."""
    config = LivenessConfig(enabled=True)
    clock = Clock(NOW)
    tracker = LivenessTracker(config)
    fake = FakeScheduler(demo_cluster(node_count=8))
    outputs = {}
    for job_id, node in (("2001", "node1"), ("2002", "node2"), ("2003", "node3")):
        outputs[job_id] = tmp_path / f"{job_id}.out"
        outputs[job_id].write_text("step\n")
        fake.add_job(fake.snapshot().jobs["1002"].model_copy(update={
            "job_id": job_id, "nodes": (node,), "stdout_path": str(outputs[job_id]), "user_id": os.getuid()}))
    sink = RecordingSink()
    monitor = LivenessMonitor(config, tracker, fake, sink, "c1", OptInRule(), clock=clock)
    for node in ("node1", "node2", "node3", "node4"):
        tracker.beat(node, NOW, 2.0)
    for t in (-1.0, -0.5):  # every job writes twice a second while all is well
        for path in outputs.values():
            os.utime(path, ((NOW + timedelta(seconds=t)).timestamp(),) * 2)
        assert await monitor.check() == []
    tracker.beat("node4", NOW + timedelta(seconds=6), 2.0)
    clock.now = NOW + timedelta(seconds=8)
    assert tracker.verdict(clock.now).suspended
    assert await monitor.check() == [] and sink.anomalies == []
    for node in ("node1", "node2", "node3", "node4"):  # the agents restarted, or the network is back
        tracker.beat(node, NOW + timedelta(seconds=9), 2.0)
    clock.now = NOW + timedelta(seconds=10)
    assert await monitor.check() == [] and sink.anomalies == []
    # One of them really gone a minute later is a loss again (its job stops writing with it).
    for node in ("node1", "node2", "node4"):
        tracker.beat(node, NOW + timedelta(seconds=60), 2.0)
    tracker.beat("node3", NOW + timedelta(seconds=54), 2.0)
    for t in [49 + i / 2 for i in range(10)]:  # writing every half second again, up to 53.5 s
        os.utime(outputs["2003"], ((NOW + timedelta(seconds=t)).timestamp(),) * 2)
        clock.now = NOW + timedelta(seconds=t)
        await monitor.check()
    clock.now = NOW + timedelta(seconds=61)
    (lost,) = await monitor.check()
    assert lost.job_id == "2003" and lost.nodes == ("node3",)


async def test_only_lines_written_since_the_last_heartbeat_count_as_peers(tmp_path: Path) -> None:
    """An old complaint about node3 (an earlier, recovered fault) in a busy job's output does not
    make an agent's silence a node loss; a new one does."""
    config = LivenessConfig(enabled=True)
    clock = Clock(NOW)
    tracker = LivenessTracker(config)
    fake = FakeScheduler(demo_cluster(node_count=8))
    out = tmp_path / "2001.out"
    out.write_text("[rank1]: Connection reset by peer node3\n" + "step\n" * 10)
    fake.add_job(fake.snapshot().jobs["1002"].model_copy(update={
        "job_id": "2001", "nodes": ("node3", "node4"), "stdout_path": str(out), "user_id": os.getuid()}))
    sink = RecordingSink()
    monitor = LivenessMonitor(config, tracker, fake, sink, "c1", OptInRule(), clock=clock)

    def write(t: float, text: str = "step\n") -> None:
        with out.open("a") as f:
            f.write(text)
        os.utime(out, ((NOW + timedelta(seconds=t)).timestamp(),) * 2)
        clock.now = NOW + timedelta(seconds=t)

    for node in ("node1", "node2", "node3", "node4"):
        tracker.beat(node, NOW, 2.0)
    os.utime(out, ((NOW - timedelta(seconds=1)).timestamp(),) * 2)
    assert await monitor.check() == []  # the monitor sees the file as it stood when node3 was last heard
    for i in range(1, 15):  # node4's ranks go on writing; node3's agent is silent from 0 s on
        write(i / 2)
        if i / 2 >= 5:
            for node in ("node1", "node2", "node4"):
                tracker.beat(node, clock.now, 2.0)
        assert await monitor.check() == []
    write(7.5, "[rank0]: Connection closed by peer [node3]:4242\n")
    (lost,) = await monitor.check()
    assert lost.nodes == ("node3",) and lost.evidence[0].endswith("corroborated by peer)")
    assert [e for e in lost.evidence if e.startswith("peer:")] == [
        "peer: [rank0]: Connection closed by peer [node3]:4242"]


class DownController(FakeScheduler):
    """Lists jobs once, then slurmctld stops answering (a node loss can take the network with it)."""

    def __init__(self) -> None:
        super().__init__(demo_cluster(node_count=8))
        self.lists = 0
        self.node_reads: list[str] = []

    async def list_jobs(self) -> Sequence[JobInfo]:
        self.lists += 1
        if self.lists > 1:
            raise SchedulerError("slurmctld is not answering")
        return await super().list_jobs()

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        raise SchedulerError("slurmctld is not answering")

    async def get_node(self, name: str) -> NodeInfo:
        self.node_reads.append(name)
        raise SchedulerError("slurmctld is not answering")


async def test_a_silent_controller_costs_only_the_slurm_signal(tmp_path: Path) -> None:
    config = LivenessConfig(enabled=True)
    clock = Clock(NOW)
    tracker = LivenessTracker(config)
    fake = DownController()
    out = tmp_path / "2001.out"
    out.write_text("step\n")
    fake.add_job(fake.snapshot().jobs["1002"].model_copy(update={
        "job_id": "2001", "nodes": ("node3",), "stdout_path": str(out), "user_id": os.getuid()}))
    monitor = LivenessMonitor(config, tracker, fake, RecordingSink(), "c1", OptInRule(), clock=clock)
    for node in ("node1", "node2", "node3", "node4"):
        tracker.beat(node, NOW, 2.0)
    for i in range(-8, 1):  # writing every half second until node3 goes silent at 0 s
        os.utime(out, ((NOW + timedelta(seconds=i / 2)).timestamp(),) * 2)
        clock.now = NOW + timedelta(seconds=i / 2)
        assert await monitor.check() == []
    found = []
    for t in range(1, 8):
        clock.now = NOW + timedelta(seconds=t)
        for node in ("node1", "node2", "node4"):
            tracker.beat(node, clock.now, 2.0)
        found += await monitor.check()
    assert [a.job_id for a in found] == ["2001"] and fake.lists >= 2
    assert monitor.errors >= 2
    assert set(fake.node_reads) == {"node3"}  # the suspect running a watched job, not the cluster
