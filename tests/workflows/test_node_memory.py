"""The cluster's memory of nodes on the real dev server: unrelated ambiguous failures isolate a node.

Jobs of three users share node1 and nothing else. Each fails ambiguously (an NCCL timeout that
names no culprit). The first incident blames nobody; the second, a different user's, makes node1
the common cause and drains it; the third job's failure there is attributed to node1 outright.
The memory is a workflow: `goodput nodes` reads it through the client service.
"""

from __future__ import annotations

import uuid

from temporalio.client import Client

from goodput.models import AnomalyKind, Category, Mode
from goodput.recover.lifecycle import IncidentState
from tests.workflows.helpers import FAST, THREE_USERS, anomaly, cluster_with_three_users, inject, result, running_worker
from workers.client import TemporalIncidentService


async def test_unrelated_ambiguous_failures_on_one_node_isolate_it(client: Client, task_queue: str) -> None:
    cluster = f"mem{uuid.uuid4().hex[:6]}"
    fake = cluster_with_three_users()
    reports = {}
    async with running_worker(client, task_queue, fake):
        for job_id in THREE_USERS:
            incident = await inject(client, task_queue, anomaly(
                job_id, kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT, cluster=cluster),
                FAST, Mode.AUTONOMOUS)
            reports[job_id] = await result(client, incident)
        standing = await TemporalIncidentService(client, task_queue).node_standing(cluster)
    first, second, third = (reports[j] for j in THREE_USERS)
    assert first.attribution is not None and first.attribution.culprit_nodes == ()
    assert second.attribution is not None and second.attribution.culprit_nodes == ("node1",)
    assert "node memory" in second.attribution.explanation and second.plan is not None
    assert second.plan.nodes_to_drain() == ("node1",)
    assert third.attribution is not None and third.attribution.culprit_nodes == ("node1",)
    drains = fake.journal("drain")
    assert [d.target for d in drains] == ["node1"] and second.incident_id in drains[0].detail
    assert all(r.state is IncidentState.RECOVERED for r in reports.values()), [r.timeline for r in reports.values()]
    by_node = {s.node: s for s in standing}
    assert by_node["node1"].suspect and by_node["node1"].users == ("alice", "bob", "mallory")
    assert not by_node["node2"].suspect
