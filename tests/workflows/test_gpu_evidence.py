"""GPU evidence reaches the incident on the real Temporal dev server, and a hang's culprit never drains.

A hang anomaly from the job's log passes the GPU evidence sink on its way in: the agents' samples of
the job's nodes (all pinned, memory idle, one GPU gone idle after being busy) put that GPU's node and
the reason on the incident. Autonomous, with exclude-before-drain off (nothing else holds a drain
back): the hang is restarted, no node is drained.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.detect.gpu_feed import FeedGpu, GpuSampleStore
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, IncidentKey, Mode
from tests.workflows.helpers import FAST, result, running_worker
from workers.client import TemporalIncidentService
from workers.gpu_feed import GpuEvidenceSink
from workers.watch import IncidentSink

pytestmark = pytest.mark.temporal
NODES = ("node1", "node2", "node3", "node4")


def gpus(node: str, *, hung: bool) -> list[FeedGpu]:
    out = []
    for i in range(4):
        util, memory = (100.0, 0.0) if hung else (97.0, 45.0)
        if hung and (node, i) == ("node3", 1):
            util = 0.0
        out.append(FeedGpu(index=i, uuid=f"GPU-{node}-{i}", utilisation_pct=util, memory_utilisation_pct=memory))
    return out


async def test_a_hang_carries_the_idle_ranks_gpu_and_drains_nothing(client: Client, task_queue: str,
                                                                   tmp_path: Path) -> None:
    cluster = f"gpuev{os.getpid()}{tmp_path.name[-6:]}".replace("_", "")[:30]
    fake = FakeScheduler(demo_cluster(node_count=8))
    fake.add_job(fake.snapshot().jobs["1002"].model_copy(update={"job_id": "2001", "nodes": NODES}))
    now = datetime.now(UTC)
    store = GpuSampleStore(window=12, max_age_s=120, max_nodes=16)
    for r in range(6):  # busy and moving memory, then the collective that never completes
        at = now - timedelta(seconds=10 * (5 - r))
        for node in NODES:
            store.put(node, at, [g.sample(node, at) for g in gpus(node, hung=r >= 3)])
    policy = FAST.model_copy(update={"mode": Mode.AUTONOMOUS})
    sink = GpuEvidenceSink(IncidentSink(TemporalIncidentService(client, task_queue), policy), store, fake)
    hang = Anomaly(id="log-hang-2001", source=AnomalySource.LOG, kind=AnomalyKind.HANG, cluster=cluster,
                   job_id="2001", evidence=["no progress for 75 s (10 x p99 of the step interval)"],
                   category=Category.HANG, observed_at=now, detected_at=now)
    async with running_worker(client, task_queue, fake):
        await sink.submit(hang)
        report = await result(client, IncidentKey(cluster=cluster, job_id="2001", job_attempt=0).workflow_id)
    (seen,) = report.anomalies
    assert seen.nodes == ("node3",) and seen.gpus == ("GPU-node3-1",), seen
    assert any("node3/gpu1" in e and "dropped out of the collective" in e for e in seen.evidence), seen.evidence
    assert any("spin in a collective" in e for e in seen.evidence)
    assert fake.journal("drain") == [], report.timeline
