"""Shared drains on the real Temporal dev server: three node incidents of one leaf switch, first
observed within one window, drain their nodes with one reason naming the fault after the first,
which keeps its own (the one reason the CLI backend's coalescer needs to send them as one
`scontrol update NodeName=a,b`), and each job incident records the fault it shared."""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client

from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.models import Mode
from goodput.ownership import owning_incident
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_health import NodeHealthState, Phase, ReturnToServicePolicy
from goodput.recover.node_incident import NodeIncidentPolicy
from goodput.recover.policy import Policy
from goodput.recover.shared_fault import owning_fault
from goodput.scheduler import SlurmSwitch
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker
from workflows.node_health import NodeHealthWorkflow, node_health_workflow_id

pytestmark = pytest.mark.temporal
SHARING = FAST.model_copy(update={"node_incident": NodeIncidentPolicy(shared_drain_window_s=60.0)})
NOT_SHARING = FAST.model_copy(update={"node_incident": NodeIncidentPolicy(shared_drain_window_s=0.0)})
AT = datetime(2026, 12, 4, 1, 0, 59, 500000, tzinfo=UTC)
LATER = AT + timedelta(seconds=1)


def one_switch() -> FakeScheduler:
    fake = FakeScheduler(demo_cluster(node_count=12))
    fake.switches = [SlurmSwitch(name="leaf1", level=0, nodes="node[1-6]")]
    return fake


async def _faults(client: Client, task_queue: str, policy: Policy, nodes: tuple[str, ...],
                  cluster: str | None = None) -> list[str]:
    first = anomaly("1001", nodes=nodes[:1], cluster=cluster).model_copy(update={"observed_at": AT})
    # a second later, across a minute's line: the grid the window used to be split this into two faults
    rest = [anomaly(str(1002 + i), nodes=(n,), cluster=first.cluster).model_copy(update={"observed_at": LATER})
            for i, n in enumerate(nodes[1:])]
    return list(await asyncio.gather(*(inject(client, task_queue, a, policy, Mode.AUTONOMOUS) for a in (first, *rest))))


async def test_a_switchs_node_incidents_drain_with_one_reason_after_the_first(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue, one_switch(), policy=SHARING) as fake:
        ids = await _faults(client, task_queue, SHARING, ("node2", "node3", "node5"))
        reports = await asyncio.gather(*(result(client, i) for i in ids))
    assert [r.state for r in reports] == [IncidentState.RECOVERED] * 3, [r.timeline for r in reports]
    drains = {d.target: d.detail for d in fake.journal("drain")}
    assert sorted(drains) == ["node2", "node3", "node5"]
    # whichever isolated first opened the fault with its own reason; the other two share the fault's
    own = [n for n, reason in drains.items() if owning_incident(reason) in ids]
    assert len(own) == 1, drains
    shared = {reason for n, reason in drains.items() if n not in own}
    assert len(shared) == 1, drains  # one reason: one command through the coalescer
    fault = owning_fault(shared.pop())
    assert fault in {f"fault-switch-leaf1-{int(t.timestamp())}" for t in (AT, LATER)}, fault
    sharing = [r for r in reports if any(f"shared drain of fault {fault}" in done for done in r.actions_done)]
    assert len(sharing) == 2, [r.actions_done for r in reports]  # each incident's record names the fault it shared


async def test_without_the_window_each_drain_names_its_incident(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue, one_switch(), policy=NOT_SHARING) as fake:
        ids = await _faults(client, task_queue, NOT_SHARING, ("node2", "node3"))
        await asyncio.gather(*(result(client, i) for i in ids))
    assert sorted(owning_incident(d.detail) or "" for d in fake.journal("drain")) == sorted(ids)


async def test_a_node_drained_with_its_faults_reason_returns_to_service(client: Client, task_queue: str) -> None:
    """The fault's reason is the one each sharing incident's return tracks (the incident hands its
    faults to the node's NodeHealthWorkflow), so every node comes back, the shared ones included."""
    returning = SHARING.model_copy(update={"return_to_service": ReturnToServicePolicy(
        enabled=True, quarantine_s=0.2, offence_window_s=0.3, check_command=(sys.executable, "-c", "pass"))})
    nodes = ("node2", "node3", "node5")
    async with running_worker(client, task_queue, one_switch(), policy=returning) as fake:
        cluster = f"c{uuid.uuid4().hex[:6]}"
        ids = await _faults(client, task_queue, returning, nodes, cluster)
        await asyncio.gather(*(result(client, i) for i in ids))
        finals: list[NodeHealthState] = await asyncio.wait_for(asyncio.gather(*(
            client.get_workflow_handle_for(NodeHealthWorkflow.run, node_health_workflow_id(cluster, n)).result()
            for n in nodes)), 60)
    assert any(owning_fault(d.detail) for d in fake.journal("drain"))  # some drains carried the fault's reason
    assert [f.phase for f in finals] == [Phase.RETURNED] * 3, [f.why for f in finals]
    assert [(await fake.get_node(n)).drained for n in nodes] == [False] * 3
