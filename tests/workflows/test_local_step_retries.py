"""A local step's retries shown to the operator (#29, `workflow.patched("local-step-retries")`).

Under `fewer-steps` `attribute` runs as a local activity, whose attempts Temporal does not list
among the run's pending activities. When the scheduler is down as an incident opens, the incident
must still say what it waits for (`goodput incident <ID>`, the console): the workflow retries the
local step itself and keeps the step, its attempt and its last failure in the report.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from goodput.models import AnomalyKind, Category, Mode
from goodput.recover.incident import WaitingStep
from goodput.recover.lifecycle import IncidentState
from goodput.scheduler import PermanentSchedulerError
from tests.fakes.flaky_scheduler import DOWN, ControllerDownAtFirst
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker
from workers.client import TemporalIncidentService
from workflows.recovery_steps import backoff


async def test_attribute_retrying_through_an_outage_is_listed_as_waiting(client: Client, task_queue: str) -> None:
    crash = anomaly(kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT,
                    cluster=f"lr{uuid.uuid4().hex[:6]}")
    service = TemporalIncidentService(client, task_queue)
    seen: list[WaitingStep] = []
    async with running_worker(client, task_queue, ControllerDownAtFirst(failures=3)):
        incident = await inject(client, task_queue, crash, FAST, Mode.AUTONOMOUS)
        handle = client.get_workflow_handle(incident)
        while (await handle.describe()).close_time is None:
            report = await service.get(incident)
            seen.extend(report.waiting)
            await asyncio.sleep(0.2)
        report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    retried = [w for w in seen if w.step == "attribute" and w.attempt >= 2]
    assert retried, seen
    assert all(DOWN in w.last_failure for w in retried), retried
    assert {w.attempt for w in retried} <= {2, 3, 4}
    assert any(w.next_attempt_at is not None for w in retried)  # between attempts: when the next one is
    assert "attribute (attempt" in retried[-1].describe() and "last failure: " in retried[-1].describe()
    assert report.waiting == ()  # nothing left waiting once the step went through
    events = (await handle.fetch_history()).events
    assert sum(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in events) >= 3  # its own backoff


async def test_a_step_that_fails_for_good_is_not_retried(client: Client, task_queue: str) -> None:
    # A permanent scheduler error is not retried, as before the patch: one attempt, then a person
    # (a second attempt would find the job and recover it).
    crash = anomaly(kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT,
                    cluster=f"lr{uuid.uuid4().hex[:6]}")
    refusing = ControllerDownAtFirst(failures=1, error=PermanentSchedulerError("the request is wrong"))
    async with running_worker(client, task_queue, refusing):
        incident = await inject(client, task_queue, crash, FAST, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is IncidentState.ESCALATED, report.timeline
    assert "step attribute failed: the request is wrong" in report.timeline[-1].detail
    assert report.waiting == ()


def test_the_workflow_waits_between_attempts_as_temporal_would() -> None:
    # STEP_RETRY's own schedule, so a local step spends as long retrying as an activity did.
    assert [backoff(n).total_seconds() for n in range(1, 10)] == [1, 2, 4, 8, 16, 30, 30, 30, 30]
