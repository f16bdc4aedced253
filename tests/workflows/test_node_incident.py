"""One fault, many jobs on the real Temporal dev server: job incidents that drain the same node
share one node incident and one isolation decision, and each still recovers on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest
from temporalio.client import Client, WorkflowHistory, WorkflowQueryFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.worker import Replayer

from activities.adapters.audit import MemoryAuditLog
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.models import Mode
from goodput.recover.audit import AuditAction
from goodput.recover.breaker import BreakerPolicy
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_incident import Isolation, NodeIncidentPolicy, NodeIncidentState, Role, node_incident_id
from tests.helpers import eventually
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker
from workers.client import TemporalIncidentService
from workflows import search
from workflows.node_incident import NodeIncidentWorkflow
from workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal
S = IncidentState


def sharing_node2(delay_s: float = 0.0) -> FakeScheduler:
    """Job 1001 on node1+node2 and job 2001 on node2 alone: node2's fault hits both; spare nodes
    (node7..node12) for both to run again."""
    fake = FakeScheduler(demo_cluster(node_count=12), action_delay_s=delay_s)
    fake.add_job(fake.snapshot().jobs["1002"].model_copy(update={"job_id": "2001", "nodes": ("node2",)}))
    return fake


async def calls(client: Client, incidents: Sequence[str], activity: str) -> int:
    """How often the incidents' workflows scheduled `activity` (a retry is not a new call)."""
    count = 0
    for incident in incidents:
        history = await client.get_workflow_handle(incident).fetch_history()
        count += sum(1 for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
                     and e.activity_task_scheduled_event_attributes.activity_type.name == activity)
    return count


async def fault(client: Client, cluster: str, node: str) -> NodeIncidentState:
    handle = client.get_workflow_handle_for(NodeIncidentWorkflow.run, node_incident_id(cluster, node))
    return await handle.query(NodeIncidentWorkflow.status)


async def until(probe: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    await eventually(probe, timeout=timeout_s, interval=0.1)


def said(report: IncidentReport, *parts: str) -> bool:
    """Some line of the incident's timeline says all of `parts`."""
    return any(all(part in e.detail for part in parts) for e in report.timeline)


async def test_two_jobs_on_one_failed_node_share_one_drain_and_both_recover(client: Client, task_queue: str) -> None:
    first = anomaly("1001", nodes=("node2",))
    cluster = first.cluster
    log = MemoryAuditLog()
    async with running_worker(client, task_queue, sharing_node2(), audit_log=log) as fake:
        ids = await asyncio.gather(inject(client, task_queue, first, FAST, Mode.AUTONOMOUS),
                                   inject(client, task_queue, anomaly("2001", nodes=("node2",), cluster=cluster),
                                          FAST, Mode.AUTONOMOUS))
        reports = await asyncio.gather(*(result(client, i) for i in ids))
        # A third job's failure on another node is another fault.
        other = await result(client, await inject(client, task_queue, anomaly("1002", nodes=("node3",),
                                                                             cluster=cluster), FAST, Mode.AUTONOMOUS))
        shared, separate = await fault(client, cluster, "node2"), await fault(client, cluster, "node3")
        listed = await TemporalIncidentService(client, task_queue).node_incidents(cluster)
        described = [await client.get_workflow_handle(i).describe() for i in ids]
    assert [r.state for r in reports] == [S.RECOVERED, S.RECOVERED], [r.timeline for r in reports]
    assert await calls(client, ids, "reserve_drain") == 1 and await calls(client, ids, "isolate") == 1
    assert [d.target for d in fake.journal("drain")] == ["node2", "node3"]
    assert sorted(r.target for r in fake.journal("requeue")) == ["1001", "1002", "2001"]
    for job_id in ("1001", "2001"):  # each recovered on healthy nodes
        job = await fake.get_job(job_id)
        assert job.state.value == "RUNNING" and "node2" not in job.nodes
    nid = node_incident_id(cluster, "node2")
    assert [r.node_incidents for r in reports] == [(nid,), (nid,)]
    assert shared.linked == 2 and {link.incident_id for link in shared.links} == set(ids)
    assert shared.decision is not None and shared.decision.outcome is Isolation.DRAINED
    leader = shared.decision.by
    joiner = next(r for r in reports if r.incident_id != leader)
    assert said(joiner, "fault shared with 1 other job", f"drained once by incident {leader}")
    assert not any("drained node2" in done for done in joiner.actions_done)
    assert len([r for r in log.read() if r.action is AuditAction.DRAIN and "node2" in r.nodes]) == 1
    assert other.node_incidents == (node_incident_id(cluster, "node3"),) and separate.linked == 1
    assert {f.node for f in listed} == {"node2", "node3"}
    assert all(d.typed_search_attributes.get(search.NODE_INCIDENTS) == [nid] for d in described)


async def test_a_job_that_fails_while_the_first_drains_waits_for_that_decision(client: Client,
                                                                              task_queue: str) -> None:
    first = anomaly("1001", nodes=("node2",))
    cluster = first.cluster
    async with running_worker(client, task_queue, sharing_node2(delay_s=3.0)) as fake:
        leader = await inject(client, task_queue, first, FAST, Mode.AUTONOMOUS)
        await until(lambda: _deciding(client, cluster))
        joiner = await inject(client, task_queue, anomaly("2001", nodes=("node2",), cluster=cluster), FAST,
                              Mode.AUTONOMOUS)
        reports = {i: await result(client, i) for i in (leader, joiner)}
    assert {r.state for r in reports.values()} == {S.RECOVERED}
    assert said(reports[joiner], f"incident {leader} is deciding, waiting for its decision")
    assert said(reports[joiner], "fault shared with 1 other job", f"drained once by incident {leader}")
    assert said(reports[leader], "seen by this job only so far", "this incident makes the isolation decision")
    assert [d.target for d in fake.journal("drain")] == ["node2"]
    assert await calls(client, (leader, joiner), "isolate") == 1


async def _deciding(client: Client, cluster: str) -> bool:
    try:
        return (await fault(client, cluster, "node2")).deciding
    except (RPCError, WorkflowQueryFailedError):  # not started yet
        return False


async def test_a_breaker_refusal_is_the_whole_faults_decision(client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"breaker": BreakerPolicy(max_drained_nodes=0)})
    first = anomaly("1001", nodes=("node2",))
    cluster = first.cluster
    async with running_worker(client, task_queue, sharing_node2()) as fake:
        ids = await asyncio.gather(inject(client, task_queue, first, policy, Mode.AUTONOMOUS),
                                   inject(client, task_queue, anomaly("2001", nodes=("node2",), cluster=cluster),
                                          policy, Mode.AUTONOMOUS))
        reports = await asyncio.gather(*(result(client, i) for i in ids))
        shared = await fault(client, cluster, "node2")
    assert [r.state for r in reports] == [S.ESCALATED, S.ESCALATED]
    assert all("breaker" in r.timeline[-1].detail for r in reports), [r.timeline[-1] for r in reports]
    assert await calls(client, ids, "reserve_drain") == 1
    assert fake.journal("drain") == [] and fake.journal("requeue") == []
    assert shared.decision is not None and shared.decision.outcome is Isolation.REFUSED


async def test_monitor_mode_links_every_job_and_recommends_once(client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"node_incident": NodeIncidentPolicy(window_s=2.0)})
    first = anomaly("1001", nodes=("node2",))
    cluster = first.cluster
    async with running_worker(client, task_queue, sharing_node2()) as fake:
        ids = [await inject(client, task_queue, a, policy, Mode.MONITOR)
               for a in (first, anomaly("2001", nodes=("node2",), cluster=cluster))]
        reports = [await result(client, i) for i in ids]
        # after its window without a new link the fault is over; its result is the fault
        handle = client.get_workflow_handle_for(NodeIncidentWorkflow.run, node_incident_id(cluster, "node2"))
        over = await asyncio.wait_for(handle.result(), timeout=30)
    assert [r.state for r in reports] == [S.RECOMMENDED_ONLY, S.RECOMMENDED_ONLY]
    assert fake.journal() == []
    assert [link.role for link in over.links] == [Role.RECORD, Role.RECORD]
    # Both were injected at once: whichever linked first recommends, once, and the other says so.
    assert over.decision is not None and over.decision.outcome is Isolation.RECOMMENDED and over.decision.by in ids
    other = reports[1 - ids.index(over.decision.by)]
    assert said(other, "fault shared with 1 other job", f"drain recommended by incident {over.decision.by}")


async def test_a_worker_restart_mid_link_replays_and_still_drains_once(client: Client, task_queue: str) -> None:
    fake = sharing_node2(delay_s=3.0)
    first = anomaly("1001", nodes=("node2",))
    cluster = first.cluster
    async with running_worker(client, task_queue, fake):
        leader = await inject(client, task_queue, first, FAST, Mode.AUTONOMOUS)
        await until(lambda: _deciding(client, cluster))
        joiner = await inject(client, task_queue, anomaly("2001", nodes=("node2",), cluster=cluster), FAST,
                              Mode.AUTONOMOUS)
        await until(lambda: _waiting(client, cluster))
    # The worker is gone while one incident drains and the other waits: a new one replays both,
    # and the node incident, from their histories.
    async with running_worker(client, task_queue, fake):
        reports = [await result(client, i) for i in (leader, joiner)]
    assert [r.state for r in reports] == [S.RECOVERED, S.RECOVERED], [r.timeline for r in reports]
    assert [d.target for d in fake.journal("drain")] == ["node2"]
    assert await calls(client, (leader, joiner), "reserve_drain") == 1
    replayer = Replayer(workflows=[RecoveryWorkflow, NodeIncidentWorkflow], data_converter=pydantic_data_converter)
    for workflow_id in (leader, joiner, node_incident_id(cluster, "node2")):
        history: WorkflowHistory = await client.get_workflow_handle(workflow_id).fetch_history()
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=True)
        assert replayed.replay_failure is None


async def _waiting(client: Client, cluster: str) -> bool:
    return bool((await fault(client, cluster, "node2")).waiting)
