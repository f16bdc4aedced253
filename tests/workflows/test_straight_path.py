"""The straight path costs few round trips (#29): an autonomous crash → requeue on the real dev server.

A storm is bound by how fast one worker completes workflow tasks, so the incident's cost to its
requeue is counted here from its own history, the way `storm-lab` counts it
(benchmarks/_history_costs.py): at most 5 workflow tasks and 40 history events from the first
anomaly to the requeue, and at most one search-attribute upsert per workflow task. The upserts
being batched must not change what the incident lists as: the attributes end as they did.
"""

from __future__ import annotations

import json
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from benchmarks._history_costs import to_requeue
from goodput.models import AnomalyKind, Category, Mode
from goodput.recover.lifecycle import IncidentState
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker
from workflows import search


async def test_a_crash_is_requeued_in_at_most_5_workflow_tasks_and_40_events(client: Client, task_queue: str) -> None:
    crash = anomaly(kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT,
                    cluster=f"sp{uuid.uuid4().hex[:6]}")
    async with running_worker(client, task_queue):
        incident = await inject(client, task_queue, crash, FAST, Mode.AUTONOMOUS)
        report = await result(client, incident)
    handle = client.get_workflow_handle(incident)
    history = await handle.fetch_history()
    assert report.state is IncidentState.RECOVERED, report.timeline
    cost = to_requeue(history.events)
    assert cost is not None, "the incident never requeued its job"
    assert cost["workflow_tasks"] <= 5, cost
    assert cost["events"] <= 40, cost
    # One upsert per workflow task at most, over the whole incident.
    per_task: list[int] = [0]
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            per_task.append(0)
        elif event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            per_task[-1] += 1
    assert max(per_task) <= 1, per_task
    # The requeue is handed attribute's record and its age, so it need not read the job whole again.
    resumes = [e.activity_task_scheduled_event_attributes for e in history.events
               if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
               and e.activity_task_scheduled_event_attributes.activity_type.name == "resume"]
    handed = json.loads(resumes[0].input.payloads[0].data)
    assert handed["known"]["job_id"] == crash.job_id and handed["known_at"], handed
    listed = (await handle.describe()).typed_search_attributes
    assert listed.get(search.STATE) == IncidentState.RECOVERED.value
    assert listed.get(search.OUTCOME) == "recovered"
    assert listed.get(search.CATEGORY) == Category.NCCL_TIMEOUT.value
    assert listed.get(search.MODE) == Mode.AUTONOMOUS.value
    assert listed.get(search.JOB_ID) == crash.job_id and listed.get(search.PARTITION)
