"""The hot-spare pool through the workflows on the real Temporal dev server and the fake cluster:
a recovered job restarts on the pool's spare and the incident says so; the node goodput drained
refills the pool once it is back in service; without a free spare the job queues as before."""

from __future__ import annotations

import asyncio
import sys

import pytest
from temporalio.client import Client

from goodput.demo.scheduler import FakeScheduler
from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_health import Phase, ReturnToServicePolicy
from goodput.recover.spares import SparePolicy
from goodput.scheduler import ActionResult, JobInfo, PermanentSchedulerError, ReservationInfo
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker
from workflows.node_health import NodeHealthWorkflow, node_health_workflow_id

pytestmark = pytest.mark.temporal
POOL = "goodput-spares"


def with_pool(*nodes: str) -> FakeScheduler:
    """The demo cluster (jobs on node1-6; node7, node8 idle) with the operator's pool."""
    fake = FakeScheduler()
    fake.add_reservation(ReservationInfo(name=POOL, nodes=nodes, users=("root",), flags=("FLEX",)))
    return fake


async def test_a_recovered_job_restarts_on_a_spare_that_its_drained_node_then_replaces(
        client: Client, task_queue: str) -> None:
    back = ReturnToServicePolicy(enabled=True, quarantine_s=0.3, check_command=(sys.executable, "-c", "pass"),
                                 offence_window_s=0.3)
    policy = FAST.model_copy(update={"spares": SparePolicy(reservation=POOL, target_size=2),
                                     "return_to_service": back})
    async with running_worker(client, task_queue, scheduler=with_pool("node8")) as fake:
        a = anomaly()  # job 1001 on node1, node2; node2's GPU fails
        report = await result(client, await inject(client, task_queue, a, policy, Mode.AUTONOMOUS))
        handle = client.get_workflow_handle_for(NodeHealthWorkflow.run, node_health_workflow_id(a.cluster, "node2"))
        health = await asyncio.wait_for(handle.result(), 30)
        job = await fake.get_job("1001")
        pool = await fake.get_reservation(POOL)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert "node8" in job.nodes and "node2" not in job.nodes
    details = [e.detail for e in report.timeline]
    assert "restarted on hot spare node8 from pool goodput-spares" in details, details
    assert health.phase is Phase.RETURNED and "added node2 to reservation goodput-spares" in health.why
    assert pool.nodes == ("node8", "node2")
    # The owner's access lasted as long as the recovery: one line in one's own job must not buy the spares.
    assert pool.users == ("root",), pool
    assert "goodput-demo's access to pool goodput-spares ended with the recovery" in details, details


async def test_an_owner_the_operator_listed_keeps_access_after_the_recovery(client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"spares": SparePolicy(reservation=POOL)})
    fake = FakeScheduler()
    fake.add_reservation(ReservationInfo(name=POOL, nodes=("node8",), users=("root", "goodput-demo"), flags=("FLEX",)))
    async with running_worker(client, task_queue, scheduler=fake):
        report = await result(client, await inject(client, task_queue, anomaly(), policy, Mode.AUTONOMOUS))
        job = await fake.get_job("1001")
        pool = await fake.get_reservation(POOL)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert "node8" in job.nodes
    assert pool.users == ("root", "goodput-demo")  # goodput takes back only what it gave
    assert not any("access to pool" in e.detail for e in report.timeline)


async def test_an_empty_pool_queues_the_job_as_before_and_the_incident_says_so(
        client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"spares": SparePolicy(reservation=POOL)})
    async with running_worker(client, task_queue, scheduler=with_pool("node3")) as fake:  # node3: busy
        report = await result(client, await inject(client, task_queue, anomaly(), policy, Mode.AUTONOMOUS))
        pool = await fake.get_reservation(POOL)
    assert report.state is IncidentState.RECOVERED, report.timeline
    details = " | ".join(e.detail for e in report.timeline)
    assert "pool goodput-spares empty (1 node(s), none free): queued normally" in details
    assert "hot spare" not in details and pool.users == ("root",)


class _ReleaseRefused(FakeScheduler):
    """The pool is offered and the owner let in, then the release fails for good: the recovery escalates."""

    async def release_job(self, job_id: str, *, known: JobInfo | None = None) -> ActionResult:
        raise PermanentSchedulerError(f"release of {job_id} refused")


async def test_an_escalated_recovery_takes_the_owners_access_back_too(client: Client, task_queue: str) -> None:
    policy = FAST.model_copy(update={"spares": SparePolicy(reservation=POOL)})
    fake = _ReleaseRefused()
    fake.add_reservation(ReservationInfo(name=POOL, nodes=("node8",), users=("root",), flags=("FLEX",)))
    async with running_worker(client, task_queue, scheduler=fake):
        report = await result(client, await inject(client, task_queue, anomaly(), policy, Mode.AUTONOMOUS))
        pool = await fake.get_reservation(POOL)
    assert report.state is IncidentState.ESCALATED, report.timeline
    assert ("reservation-user", POOL, "goodput-demo") in [(e.op, e.target, e.detail) for e in fake.journal()]
    assert pool.users == ("root",), pool
