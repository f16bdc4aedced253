"""Helpers for workflow tests: anomalies, a running worker on a fake cluster, waiting on state."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    SignalWorkflowInput,
    StartWorkflowInput,
    WorkflowHandle,
    WorkflowQueryFailedError,
)

from goodput.demo.scheduler import FakeScheduler
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Mode
from goodput.recover.audit import AuditLog
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.recover.trust import AutonomyPolicy
from goodput.scheduler import JobInfo, JobState
from tests.fakes.notifier import RecordingNotifier
from tests.helpers import eventually
from workers.client import TemporalIncidentService
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow

# What a recovery does once it acts alone. Earned autonomy and the second signal for a drain are
# on by default (a rule with no record at the site waits for approval; a node only the job's log
# blames is excluded, not drained): these tests opt out in their own policy, so an autonomous
# incident acts on one log line as they were written to test. The defaults themselves are tested
# in test_trust_record.py, test_exclude_before_drain.py and test_safe_defaults.py.
# `policy.model_copy(update=ACTS_ALONE)` opts another policy out the same way.
ACTS_ALONE: dict[str, object] = {"autonomy": AutonomyPolicy(earned=False),
                                 "exclude_before_drain": ExcludeBeforeDrainPolicy(enabled=False)}
FAST = Policy(coalesce_window_s=0.2, verify_poll_interval_s=0.2, verify_running_timeout_s=20, linger_s=0,
              autonomy=AutonomyPolicy(earned=False), exclude_before_drain=ExcludeBeforeDrainPolicy(enabled=False))


def anomaly(job_id: str = "1001", *, kind: AnomalyKind = AnomalyKind.GPU_FAULT,
            nodes: tuple[str, ...] = ("node2",), category: Category | None = None,
            attempt: int = 0, cluster: str | None = None, evidence: tuple[str, ...] = ()) -> Anomaly:
    now = datetime.now(UTC)
    return Anomaly(id=f"a-{uuid.uuid4().hex[:12]}", source=AnomalySource.LOG, kind=kind,
                   cluster=cluster or f"c{uuid.uuid4().hex[:6]}", job_id=job_id, job_attempt=attempt,
                   nodes=nodes, category=category, evidence=list(evidence), observed_at=now,
                   detected_at=now)


@asynccontextmanager
async def running_worker(client: Client, task_queue: str, scheduler: FakeScheduler | None = None,
                         notifier: RecordingNotifier | None = None,
                         audit_log: AuditLog | None = None,
                         policy: Policy | None = None) -> AsyncIterator[FakeScheduler]:
    """A worker on `scheduler`; `policy` is the service's (what `goodput inject` incidents run under)."""
    fake = scheduler or FakeScheduler()
    worker = build_worker(client, task_queue, fake, notifier or RecordingNotifier(),
                          fail_workflows_on_bugs=True, audit_log=audit_log, policy=policy)
    async with worker:
        yield fake


async def inject(client: Client, task_queue: str, a: Anomaly, policy: Policy = FAST,
                 mode: Mode | None = None, *, index: bool = True) -> str:
    result = await TemporalIncidentService(client, task_queue, index=index).inject(a, policy, mode)
    return result.incident_id


async def wait_for_state(client: Client, incident_id: str, *states: IncidentState,
                         timeout_s: float = 30.0) -> IncidentReport:
    handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident_id)
    try:
        return await eventually(lambda: handle.query(RecoveryWorkflow.report), lambda r: r.state in states,
                                timeout=timeout_s, interval=0.1, what=f"{incident_id} in {states}")
    except WorkflowQueryFailedError as err:
        # A query replays the run when the worker no longer holds it: a replay that disagrees
        # with the history fails here. Its history says which command came where (a CI run failed
        # once on a patch marker, 2026-12-04, and could not be reproduced).
        raise AssertionError(f"query of {incident_id} failed: {err}\n{await history_outline(handle)}") from err


async def history_outline(handle: WorkflowHandle[Any, Any]) -> str:
    """The run's history, one line per event: id, type and what names it (activity, marker, patch)."""
    lines = []
    async for event in handle.fetch_history_events():
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        name = ""
        if event.HasField("activity_task_scheduled_event_attributes"):
            name = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.HasField("marker_recorded_event_attributes"):
            marker = event.marker_recorded_event_attributes
            details = {k: [p.data[:120].decode(errors="replace") for p in v.payloads]
                       for k, v in marker.details.items()}
            name = f"{marker.marker_name} {details}"
        elif event.HasField("workflow_execution_signaled_event_attributes"):
            name = event.workflow_execution_signaled_event_attributes.signal_name
        lines.append(f"{event.event_id:4d} {kind} {name}".rstrip())
    return "\n".join(lines)


async def result(client: Client, incident_id: str) -> IncidentReport:
    handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident_id)
    return await asyncio.wait_for(handle.result(), timeout=60)


# Three users' jobs that share node1 and nothing else (the node memory tests).
THREE_USERS = {"2001": ("alice", ("node1", "node2")), "2002": ("mallory", ("node1", "node3")),
        "2003": ("bob", ("node1", "node4"))}


def cluster_with_three_users() -> FakeScheduler:
    fake = FakeScheduler()
    for job_id, (user, nodes) in THREE_USERS.items():
        fake.add_job(JobInfo(job_id=job_id, name=f"train-{user}", state=JobState.RUNNING, partition="gpu",
                             nodes=nodes, requeue=True, comment="goodput:opt-in", user=user, user_id=5000,
                             command="train.sbatch"))
    return fake


async def held_by_slurm() -> FakeScheduler:
    """The fake with job 1001 as slurmctld (25.11+) leaves it after an expedited requeue: failed
    (exit 1), requeued and held at once."""
    fake = FakeScheduler()
    job = await fake.get_job("1001")
    fake.add_job(job.model_copy(update={
        "state": JobState.PENDING, "held": True, "expedite_held": True, "restart_count": job.restart_count + 1,
        "exit_code": "1:0", "state_reason": "job_requeued_in_held_state"}))
    return fake


class DeliveryCalls(Interceptor):
    """Calls `seen(kind, signal)` before each signal-with-start (`"start"`) and plain signal
    (`"signal"`) a client sends: to count how anomalies travel, or to shed one as a busy server would
    (`seen` raising)."""

    def __init__(self, seen: Callable[[str, str], None]) -> None:
        self._seen = seen

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        seen = self._seen

        class Watching(OutboundInterceptor):
            async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
                seen("start", input.start_signal or "")
                return await super().start_workflow(input)

            async def signal_workflow(self, input: SignalWorkflowInput) -> None:
                seen("signal", input.signal)
                await super().signal_workflow(input)

        return Watching(next)


def with_interceptor(client: Client, interceptor: Interceptor) -> Client:
    """Another client on the same connection, its calls passing through `interceptor`."""
    return Client(client.service_client, namespace=client.namespace, data_converter=client.data_converter,
                  interceptors=[interceptor])
