"""A storm of incidents asks the cluster's node memory and drain breaker at once, on the real server.

Temporal admits at most 10 updates in flight per workflow; past that it refuses and callers back
off (the lab storm benchmark: 62-93 s to a requeue that takes 1.6 s alone). Asks made while an
update is in flight now go together as the next update, so 60 concurrent asks are a handful of
updates, none refused, and the breaker still grants exactly its limit.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from temporalio.client import Client

from activities.adapters.breaker import TemporalDrainGate
from activities.adapters.node_memory import TemporalNodeMemory
from activities.adapters.trust import TemporalTrustRecord
from goodput.diagnose.node_memory import NodeMemoryPolicy, Observation
from goodput.recover.breaker import BreakerPolicy, DrainRequest
from goodput.recover.trust import AutonomyPolicy, Fate, TrustEvent
from tests.workflows.helpers import cluster_with_three_users, running_worker
from workers.client import TemporalIncidentService

STORM = 60


async def test_sixty_incidents_at_once_consult_the_memory_and_the_breaker_in_a_few_updates(
        client: Client, task_queue: str) -> None:
    cluster = f"storm{uuid.uuid4().hex[:6]}"
    memory, gate = TemporalNodeMemory(client, task_queue), TemporalDrainGate(client, task_queue)
    now = datetime.now(UTC)
    async with running_worker(client, task_queue, cluster_with_three_users()):
        verdicts = await asyncio.wait_for(asyncio.gather(*(
            memory.consult(cluster, Observation(incident_id=f"inc-{i}", job_id=str(i), user=f"u{i % 7}",
                                                nodes=("node1",), ambiguous=True, at=now), NodeMemoryPolicy())
            for i in range(STORM))), timeout=60)
        drains = await asyncio.wait_for(asyncio.gather(*(
            gate.reserve(cluster, DrainRequest(incident_id=f"inc-{i}", nodes=(f"node{i}",)), BreakerPolicy())
            for i in range(STORM))), timeout=60)
        standing = await TemporalIncidentService(client, task_queue).node_standing(cluster)
    assert len(verdicts) == STORM
    # Seven users failed on node1 alone: the memory saw every consultation and names it.
    assert any(v.suspects for v in verdicts) and {s.node for s in standing if s.suspect} == {"node1"}
    assert [d.allowed for d in drains].count(True) == BreakerPolicy().max_drained_nodes
    for batcher in (*memory._batchers.values(), *gate._batchers.values()):
        assert batcher.batches <= STORM // 4, batcher.batches


async def test_sixty_incidents_at_once_report_to_the_track_record_in_a_few_updates(
        client: Client, task_queue: str) -> None:
    """Every incident tells its cluster's track record its recommendation (#29: in the lab storm
    these updates were refused ~19 times per incident, consult_trust 20 s at the median)."""
    cluster = f"storm{uuid.uuid4().hex[:6]}"
    record = TemporalTrustRecord(client, task_queue)
    now = datetime.now(UTC)
    async with running_worker(client, task_queue):
        answers = await asyncio.wait_for(asyncio.gather(*(
            record.note(cluster, TrustEvent(rule="nccl-timeout", fate=Fate.RECOMMENDED, incident_id=f"inc-{i}",
                                            at=now, job_id=str(i)), AutonomyPolicy())
            for i in range(STORM))), timeout=60)
        summaries = await record.read(cluster)
    assert len(answers) == STORM and all(a.rule == "nccl-timeout" for a in answers)
    assert [s.recommendations for s in summaries if s.rule == "nccl-timeout"] == [STORM]
    # A rule waiting for approval is answered from the worker's snapshot; the reports go as
    # batched signals (goodput.recover.trust_snapshot).
    assert record.from_snapshot == STORM
    for batcher in (*record._batchers.values(), *record._signallers.values()):
        assert batcher.batches <= STORM // 4, batcher.batches
