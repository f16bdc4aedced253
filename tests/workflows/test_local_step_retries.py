"""A local step's retries shown to the operator (#29, `workflow.patched("local-step-retries")`).

Under `fewer-steps` `attribute` runs as a local activity, whose attempts Temporal does not list
among the run's pending activities. When the scheduler is down as an incident opens, the incident
must still say what it waits for (`goodput incident <ID>`, the console): the workflow retries the
local step itself and keeps the step, its attempt and its last failure in the report.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from goodput.models import AnomalyKind, Category, Mode, OperatorDecision
from goodput.recover.incident import Decision, DecisionVerb, WaitingStep
from goodput.recover.lifecycle import IncidentState
from goodput.scheduler import PermanentSchedulerError
from tests.fakes.flaky_scheduler import DOWN, ControllerDownAtFirst
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker
from workers.client import TemporalIncidentService
from workflows.recovery_steps import Escalation, backoff, run_local_step


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


def local_activity(event: HistoryEvent) -> str | None:
    """The activity type of a local activity's marker (None: another event)."""
    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return None
    marker = event.marker_recorded_event_attributes
    if marker.marker_name != "core_local_activity":
        return None
    kind: str = json.loads(marker.details["data"].payloads[0].data)["activity_type"]
    return kind


async def test_an_operators_cancel_during_the_retry_wait_ends_the_incident_at_once(client: Client,
                                                                                   task_queue: str) -> None:
    # `goodput cancel` (the `decide` update) while attribute waits out its backoff: the incident is
    # cancelled then, not after the wait or another attempt, and waits for nothing any more.
    crash = anomaly(kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT,
                    cluster=f"lr{uuid.uuid4().hex[:6]}")
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue, ControllerDownAtFirst(failures=1000)):
        incident = await inject(client, task_queue, crash, FAST, Mode.AUTONOMOUS)
        while True:  # a wait of 4 s (before attempt 4), with more than a second of it still to come
            waiting = (await service.get(incident)).waiting
            due = [w.next_attempt_at for w in waiting if w.step == "attribute" and w.attempt >= 4]
            if due and due[0] is not None and due[0] - datetime.now(UTC) > timedelta(seconds=1):
                break
            await asyncio.sleep(0.1)
        said = await service.decide(incident, Decision(verb=DecisionVerb.CANCEL,
                                                       by=OperatorDecision(who="alice", reason="maintenance")))
        report = await result(client, incident)
        events = (await client.get_workflow_handle(incident).fetch_history()).events
    assert said is IncidentState.CANCELLED
    assert report.state is IncidentState.CANCELLED, report.timeline
    assert "cancelled by alice: maintenance" in [e.detail for e in report.timeline]
    assert report.waiting == ()
    assert report.attribution is None and report.actions_done == ()  # never got as far as acting
    kinds = [e.event_type for e in events]
    accepted = kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
    # The backoff's timer was cancelled by the decision, and no attempt ran after it.
    assert EventType.EVENT_TYPE_TIMER_CANCELED in kinds[accepted:]
    assert EventType.EVENT_TYPE_TIMER_FIRED not in kinds[accepted:]
    attempts = [i for i, e in enumerate(events) if local_activity(e) == "attribute"]
    assert len(attempts) == 3 and max(attempts) < accepted


# A step that spends every attempt: STEP_RETRY's 10 attempts wait 151 s on the real server (no
# time-skipping), so the same `run_local_step` runs here under a short schedule of 4 attempts.
SHORT = RetryPolicy(initial_interval=timedelta(milliseconds=100), backoff_coefficient=2.0,
                    maximum_interval=timedelta(milliseconds=300), maximum_attempts=4)


class AlwaysDown:
    """`attribute` with the controller down for good; counts its calls (each attempt is one)."""

    def __init__(self) -> None:
        self.calls = 0

    @activity.defn(name="attribute")
    async def attribute(self, job_id: str) -> str:
        self.calls += 1
        raise ApplicationError(f"{DOWN} (call {self.calls})")


@workflow.defn(name="SpendsEveryAttempt", sandboxed=False)
class SpendsEveryAttempt:
    def __init__(self) -> None:
        self.shown: list[WaitingStep | None] = []

    @workflow.run
    async def run(self) -> tuple[str, list[WaitingStep | None]]:
        try:
            await run_local_step("attribute", "1001", str, lambda: False, timedelta(seconds=5),
                                 lambda _step, waiting: self.shown.append(waiting), policy=SHORT)
        except Escalation as why:
            return str(why), self.shown
        return "went through", self.shown


async def test_a_step_that_spends_every_attempt_escalates_with_its_last_failure(client: Client,
                                                                               task_queue: str) -> None:
    down = AlwaysDown()
    async with Worker(client, task_queue=task_queue, workflows=[SpendsEveryAttempt], activities=[down.attribute]):
        why, shown = await client.execute_workflow(SpendsEveryAttempt.run, id=f"spend-{uuid.uuid4().hex[:8]}",
                                                   task_queue=task_queue,
                                                   execution_timeout=timedelta(seconds=60))
    assert down.calls == 4
    assert why == f"step attribute failed: {DOWN} (call 4)"  # the last failure's own words
    waits = [w for w in shown if w is not None]
    assert [w.attempt for w in waits if w.next_attempt_at is not None] == [2, 3, 4]  # 4 attempts, no 5th
    assert all(DOWN in w.last_failure for w in waits)
    assert shown[-1] is None  # nothing left waiting once it gave up
