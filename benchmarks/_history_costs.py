"""What one incident cost Temporal up to its requeue, read from its workflow history.

Why: issue #29 sets its targets on the straight path (autonomous crash → requeue) per incident —
workflow tasks and history events from the first anomaly to the requeue — and a history is where
those are counted, not estimated. `storm-lab` folds this over every incident of a round; the
replay corpus (tests/workflows/histories/) and the shape test read the same function, so the
benchmark, the tests and docs/scaling.md count the same way.

The requeue is the scheduling of the `resume` activity (Slurm's requeue runs inside it), or, for a
`resume` run as a local activity, its marker. Workflow tasks are counted as started (a task that
timed out and ran again is two). `histories` reads a round's every history once for all of it.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterable
from datetime import UTC
from typing import Any

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from goodput.recover.incident import IncidentReport
from workflows.recovery import RecoveryWorkflow

_LOCAL_ACTIVITY_MARKER = "core_local_activity"
_PATCH_MARKER = "core_patch"


def _kind(event: HistoryEvent) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


def local_activity(event: HistoryEvent) -> dict[str, Any] | None:
    """What a local activity's marker records (the SDK's JSON `data` detail: `activity_type`,
    `original_schedule_time`, `complete_time`, ...); None for any other event."""
    if _kind(event) != "MARKER_RECORDED":
        return None
    attributes = event.marker_recorded_event_attributes
    if attributes.marker_name != _LOCAL_ACTIVITY_MARKER or "data" not in attributes.details:
        return None
    payloads = attributes.details["data"].payloads
    try:
        data = json.loads(payloads[0].data) if payloads else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def local_activity_type(event: HistoryEvent) -> str | None:
    """The activity type of a local activity's marker; None for any other event."""
    name = (local_activity(event) or {}).get("activity_type")
    return name if isinstance(name, str) else None


def to_requeue(events: Iterable[HistoryEvent]) -> dict[str, Any] | None:
    """Counts from the workflow's start through the requeue's scheduling; None when the incident
    never resumed its job (monitor mode, an escalation, a drain-only plan)."""
    kinds: Counter[str] = Counter()
    activities: Counter[str] = Counter()
    for count, event in enumerate(events, start=1):
        kind = _kind(event)
        kinds[kind] += 1
        if kind == "ACTIVITY_TASK_SCHEDULED":
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            activities[name] += 1
            if name == "resume":
                return _costs(count, kinds, activities)
        elif kind == "MARKER_RECORDED":
            marker = event.marker_recorded_event_attributes.marker_name
            kinds[f"MARKER:{marker}"] += 1
            if local_activity_type(event) == "resume":
                return _costs(count, kinds, activities)
    return None


def _costs(events: int, kinds: Counter[str], activities: Counter[str]) -> dict[str, Any]:
    return {"events": events, "workflow_tasks": kinds["WORKFLOW_TASK_STARTED"],
            "activities": sum(activities.values()), "activity_types": dict(activities),
            "local_activities": kinds[f"MARKER:{_LOCAL_ACTIVITY_MARKER}"],
            "patch_markers": kinds[f"MARKER:{_PATCH_MARKER}"],
            "search_attribute_upserts": kinds["UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"],
            "timers": kinds["TIMER_STARTED"], "signals": kinds["WORKFLOW_EXECUTION_SIGNALED"]}


def mean_to_requeue(costs: Iterable[dict[str, Any] | None]) -> dict[str, Any]:
    """The mean cost to the requeue over the incidents that requeued, per counted kind."""
    counted = [c for c in costs if c is not None]
    keys = [k for k in (counted[0] if counted else {}) if k != "activity_types"]
    return {"incidents": len(counted), **{k: round(sum(c[k] for c in counted) / len(counted), 2) for k in keys}}


CLOSING = frozenset({"COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED", "CONTINUED_AS_NEW"})


async def histories(client: Client, incidents: set[str]) -> dict[str, dict[str, Any]]:
    """Per incident: its report, event counts by type, activity types and how long each took
    (scheduled → completed: queueing and running), its closing time, and how long its workflow tasks
    waited for a worker (scheduled → started; Temporal writes an activity's started event only when
    it ends, so activities are timed to completion instead)."""
    gate = asyncio.Semaphore(16)

    async def one(incident: str) -> tuple[str, dict[str, Any]]:
        async with gate:
            handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident)
            history = await handle.fetch_history()
            # An incident still open (a lab fault parked its job) answers the query; its result
            # would wait for ever. So histories are read while the round's workers still run.
            closed = bool(history.events) and EventType.Name(history.events[-1].event_type).removeprefix(
                "EVENT_TYPE_WORKFLOW_EXECUTION_") in CLOSING
            report: IncidentReport = await (handle.result() if closed else handle.query(RecoveryWorkflow.report))
        scheduled: dict[int, float] = {}
        names: dict[int, str] = {}
        row: dict[str, Any] = {"report": report, "types": Counter(), "activities": Counter(), "wft_wait": [],
                               "wft_trip": [], "took": {}, "to_requeue": to_requeue(history.events),
                               "events": history.events}
        for event in history.events:
            kind, at = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_"), event.event_time.ToDatetime(UTC)
            row["types"][kind] += 1
            if kind == "WORKFLOW_TASK_TIMED_OUT":  # which timeout: a missed sticky pickup, or a slow task
                why = TimeoutType.Name(event.workflow_task_timed_out_event_attributes.timeout_type)
                row["types"][f"{kind}:{why.removeprefix('TIMEOUT_TYPE_')}"] += 1
            if kind in ("WORKFLOW_TASK_SCHEDULED", "ACTIVITY_TASK_SCHEDULED"):
                scheduled[event.event_id] = at.timestamp()
            if kind == "ACTIVITY_TASK_SCHEDULED":
                names[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
                row["activities"][names[event.event_id]] += 1
            elif kind == "WORKFLOW_TASK_STARTED":
                row["wft_wait"].append(at.timestamp() - scheduled[event.workflow_task_started_event_attributes
                                                                  .scheduled_event_id])
            elif kind == "WORKFLOW_TASK_COMPLETED":
                row["wft_trip"].append(at.timestamp() - scheduled[event.workflow_task_completed_event_attributes
                                                                  .scheduled_event_id])
            elif kind == "WORKFLOW_EXECUTION_STARTED":
                row["opened"] = at.timestamp()
            elif kind == "ACTIVITY_TASK_COMPLETED":
                started = event.activity_task_completed_event_attributes.scheduled_event_id
                row["took"].setdefault(names[started], []).append(at.timestamp() - scheduled[started])
            row["closed"] = at.timestamp()
        return incident, row

    return dict(await asyncio.gather(*(one(i) for i in sorted(incidents))))
