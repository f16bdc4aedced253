"""Fewer steps to the requeue (#29, `workflow.patched("fewer-steps")`) on the real dev server.

A storm is bound by how many workflow tasks each incident costs before its requeue. Under the
patch `attribute` runs as a local activity and the node memory and the track record are asked in
one round trip (`consult_memory_and_trust`) when the memory cannot change what the record is
told. These tests count the tasks of a plain crash, and check that the record is still told what
the old path told it when the memory does change the attribution (it convicts a node).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from goodput.models import AnomalyKind, Category, Mode, OperatorDecision
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState
from goodput.recover.trust import AutonomyPolicy
from tests.workflows.helpers import (
    FAST,
    THREE_USERS,
    anomaly,
    cluster_with_three_users,
    inject,
    result,
    running_worker,
    wait_for_state,
)
from workers.client import TemporalIncidentService


def _to_resume(events: list[HistoryEvent]) -> list[HistoryEvent]:
    """The history up to the `resume` activity's scheduling (the requeue runs in it)."""
    for i, event in enumerate(events):
        if (event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and event.activity_task_scheduled_event_attributes.activity_type.name == "resume"):
            return events[:i + 1]
    raise AssertionError("the incident never scheduled its resume")


def _scheduled(events: list[HistoryEvent]) -> list[tuple[str, Any]]:
    """Each activity scheduled: its name and its decoded input (JSON payloads)."""
    out = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            out.append((attrs.activity_type.name, json.loads(attrs.input.payloads[0].data)))
    return out


async def test_a_crash_reaches_its_requeue_in_at_most_3_workflow_tasks(client: Client, task_queue: str) -> None:
    # The target is 5 in a storm, where a job's later anomalies land between tasks and
    # each costs one; a single crash is the floor those add to.
    crash = anomaly(kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT,
                    cluster=f"fs{uuid.uuid4().hex[:6]}")
    async with running_worker(client, task_queue):
        incident = await inject(client, task_queue, crash, FAST, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    events = _to_resume(list((await client.get_workflow_handle(incident).fetch_history()).events))
    completed = sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events)
    assert completed <= 3, [EventType.Name(e.event_type) for e in events]
    assert len(events) <= 30, [EventType.Name(e.event_type) for e in events]


async def test_the_record_hears_the_attribution_the_memory_left(client: Client, task_queue: str) -> None:
    cluster = f"fsm{uuid.uuid4().hex[:6]}"
    fake = cluster_with_three_users()
    jobs = list(THREE_USERS)[:2]
    reports, histories = {}, {}
    async with running_worker(client, task_queue, fake):
        for job_id in jobs:
            incident = await inject(client, task_queue, anomaly(
                job_id, kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT, cluster=cluster),
                FAST, Mode.AUTONOMOUS)
            reports[job_id] = await result(client, incident)
            histories[job_id] = _to_resume(list((await client.get_workflow_handle(incident).fetch_history()).events))
    first, second = (reports[j] for j in jobs)
    assert all(r.state is IncidentState.RECOVERED for r in (first, second)), [first.timeline, second.timeline]
    # The memory convicted nothing for the first: one round trip answered memory and record.
    first_steps = _scheduled(histories[jobs[0]])
    assert [name for name, _ in first_steps] == ["consult_memory_and_trust", "resume"], first_steps
    rule = first_steps[0][1]["trust"]["event"]["rule"]
    assert rule and first_steps[0][1]["trust"]["event"]["fate"] == "recommended"
    # It convicted node1 for the second: drain then requeue, and the record, which the combined
    # step did not tell (the drain could have been refused), was told once the plan passed.
    assert second.plan is not None and second.plan.nodes_to_drain() == ("node1",)
    second_steps = _scheduled(histories[jobs[1]])
    names = [name for name, _ in second_steps]
    assert names[0] == "consult_memory_and_trust" and names[-1] == "resume", names
    told = [arg for name, arg in second_steps if name == "consult_trust"]
    assert len(told) == 1 and told[0]["event"]["rule"] == rule, told
    assert [d.target for d in fake.journal("drain")] == ["node1"]


async def test_the_gates_hold_on_the_record_s_early_answer(client: Client, task_queue: str) -> None:
    """A record that gave the rule no autonomy makes an autonomous partition ask first, and an
    engaged kill switch makes the incident only recommend, with the answer taken from the one
    round trip beside the memory: the same outcomes and timeline lines as when asked on its own."""
    service = TemporalIncidentService(client, task_queue)
    unearned = FAST.model_copy(update={"autonomy": AutonomyPolicy(earned=True, min_decisions=2, min_agreement=0.0),
                                       "approval_timeout_s": 120.0})
    async with running_worker(client, task_queue) as fake:
        asks = await inject(client, task_queue, anomaly(
            kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT, cluster=f"fsa{uuid.uuid4().hex[:6]}"),
            unearned, Mode.AUTONOMOUS)
        waiting = await wait_for_state(client, asks, IncidentState.AWAITING_APPROVAL)
        switched = f"fsk{uuid.uuid4().hex[:6]}"
        await service.kill_switch(switched, True, OperatorDecision(who="alice", reason="bad firmware"))
        only = await result(client, await inject(client, task_queue, anomaly(
            "1002", kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT, cluster=switched),
            FAST, Mode.AUTONOMOUS))
        await service.decide(asks, Decision(verb=DecisionVerb.CANCEL, by=OperatorDecision(who="carol", reason="test")))
        await result(client, asks)  # closed: its verdict went to the record
        assert fake.journal() == []
    assert any("0 operator decisions, 2 needed" in e.detail for e in waiting.timeline), waiting.timeline
    assert only.state is IncidentState.RECOMMENDED_ONLY, only.timeline
    details = [e.detail for e in only.timeline]
    switch_line = next(i for i, d in enumerate(details) if "kill switch engaged by alice" in d)
    assert "recommended" in details[switch_line + 1], details
    for incident in (asks, only.incident_id):
        history = await client.get_workflow_handle(incident).fetch_history()
        steps = _scheduled(list(history.events))
        assert steps[0][0] == "consult_memory_and_trust", steps
        # The record heard the recommendation once, beside the memory; only the cancel's verdict after.
        told = [arg["event"]["fate"] for name, arg in steps if name == "consult_trust"]
        assert told == (["disagreed"] if incident == asks else []), steps
