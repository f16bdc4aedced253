"""Node loss on the real Temporal dev server: real heartbeats over HTTP, the monitor, the incident sink.

A node whose agent went silent *and* whose job's output stopped with it opens the job's incident,
which drains the node through its node incident and says what corroborated the loss. The same
silence with the job still writing opens nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from activities.adapters.heartbeat import HeartbeatSender
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.detect.node_liveness import LivenessConfig, LivenessTracker, heartbeat_token
from goodput.detect.watch import OptInRule
from goodput.models import IncidentKey, Mode
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_incident import node_incident_id
from tests.workflows.helpers import FAST, result, running_worker
from workers.client import TemporalIncidentService
from workers.liveness import HeartbeatServer, LivenessMonitor
from workers.watch import IncidentSink

pytestmark = pytest.mark.temporal
SECRET = b"s" * 32
NODES = ("node1", "node2", "node3", "node4")


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Rig:
    clock: Clock
    server: HeartbeatServer
    monitor: LivenessMonitor
    fake: FakeScheduler
    output: Path
    cluster: str

    async def beat(self, *nodes: str) -> None:
        async with httpx.AsyncClient(timeout=10) as session:
            for node in nodes:
                sender = HeartbeatSender(self.server.url, heartbeat_token(SECRET, self.cluster, node),
                                         cluster=self.cluster, node=node, interval_s=2.0)
                assert await sender.beat(session)

    def wrote_output(self, at: datetime) -> None:
        os.utime(self.output, (at.timestamp(), at.timestamp()))


@pytest.fixture
async def rig(client: Client, task_queue: str, tmp_path: Path) -> AsyncIterator[Rig]:
    cluster = f"loss{os.getpid()}{tmp_path.name[-6:]}".replace("_", "")[:30]
    output = tmp_path / "job-2001.out"
    output.write_text("iteration 1\n")
    fake = FakeScheduler(demo_cluster(node_count=8))
    fake.add_job(fake.snapshot().jobs["1002"].model_copy(update={"job_id": "2001", "nodes": ("node2",),
                                                                 "stdout_path": str(output), "user_id": os.getuid()}))
    config = LivenessConfig(enabled=True, port=0)
    tracker = LivenessTracker(config)
    clock = Clock(datetime.now(UTC))
    server = HeartbeatServer(config, tracker, cluster, SECRET, clock=clock)
    policy = FAST.model_copy(update={"mode": Mode.AUTONOMOUS})
    sink = IncidentSink(TemporalIncidentService(client, task_queue), policy)
    monitor = LivenessMonitor(config, tracker, fake, sink, cluster, OptInRule(), clock=clock)
    await server.start()
    try:
        async with running_worker(client, task_queue, fake):
            yield Rig(clock, server, monitor, fake, output, cluster)
    finally:
        await server.stop()


async def silence_node2(rig: Rig) -> datetime:
    """The job writes every 0.7 s while every agent beats; then all but node2's agent beat again;
    7 s after node2's last heartbeat, the monitor looks."""
    last = rig.clock.now
    await rig.beat(*NODES)
    for written in (-1.0, -0.3):  # the monitor learns the job's rhythm while all is well
        rig.wrote_output(last + timedelta(seconds=written))
        assert await rig.monitor.check() == []
    rig.clock.now = last + timedelta(seconds=6)
    await rig.beat("node1", "node3", "node4")
    rig.clock.now = last + timedelta(seconds=7)
    return last


async def test_a_silent_node_whose_job_stopped_writing_is_lost(rig: Rig, client: Client) -> None:
    await silence_node2(rig)
    (anomaly,) = await rig.monitor.check()
    assert anomaly.nodes == ("node2",) and anomaly.job_id == "2001"
    incident = IncidentKey(cluster=rig.cluster, job_id="2001", job_attempt=0).workflow_id
    report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert report.node_incidents == (node_incident_id(rig.cluster, "node2"),)
    assert [d.target for d in rig.fake.journal("drain")] == ["node2"]
    assert any("node loss: node2 (heartbeat missed, corroborated by output)" in e
               for a in report.anomalies for e in a.evidence), report.anomalies
    assert await rig.monitor.check() == []  # the same silence is submitted once


async def test_a_silent_node_alone_opens_nothing(rig: Rig, client: Client) -> None:
    last = await silence_node2(rig)
    rig.wrote_output(last + timedelta(seconds=5))  # the job kept writing: the agent, not the node
    assert await rig.monitor.check() == []
    incident = IncidentKey(cluster=rig.cluster, job_id="2001", job_attempt=0).workflow_id
    with pytest.raises(RPCError):
        await client.get_workflow_handle(incident).describe()
    assert rig.fake.journal("drain") == []
