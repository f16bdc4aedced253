"""What the console reads from Temporal: pages of incidents by visibility query, counts, reports,
and each incident's activity steps from its history.

Listing never scans histories: filters become a visibility query over goodput's search
attributes, pages come with Temporal's own page token, and counts are count queries; only the
incident an operator opens is read in full. That keeps the console fast with thousands of open
and a hundred thousand closed incidents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, RPCError

from goodput.console.filters import IncidentFilter
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.service.incidents import IncidentSummary, ServiceError, ServiceUnavailableError
from workers.client import RPC_TIMEOUT, TemporalIncidentService, summary_of
from workflows import search

BASE_QUERY = "WorkflowType = 'RecoveryWorkflow'"


def visibility_query(flt: IncidentFilter, now: datetime) -> str:
    """The filter as a visibility query; every value was validated against its grammar
    (goodput.console.filters), so quoting cannot be escaped."""
    parts = [BASE_QUERY]
    for key, value in ((search.STATE, flt.state), (search.MODE, flt.mode), (search.CATEGORY, flt.category),
                       (search.CLUSTER, flt.cluster), (search.PARTITION, flt.partition), (search.JOB_ID, flt.job),
                       (search.CULPRIT_NODES, flt.node)):
        if value is not None:
            parts.append(f"{key.name} = '{value}'")
    start = flt.start(now)
    if start is not None:
        parts.append(f"StartTime >= '{start.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}'")
    if flt.open_only:
        parts.append("ExecutionStatus = 'Running'")
    return " AND ".join(parts)


@dataclass(frozen=True)
class Page:
    rows: Sequence[IncidentSummary]
    next_token: bytes | None


@dataclass(frozen=True)
class ActivityStep:
    """One activity of an incident as its history tells it: when, how long, how many tries."""

    name: str
    scheduled_at: datetime | None
    seconds: float | None
    attempts: int
    outcome: str  # completed, failed, timed out, running


class ConsoleBackend:
    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.service = TemporalIncidentService(client, task_queue)

    async def page(self, flt: IncidentFilter, token: bytes | None = None) -> Page:
        query = visibility_query(flt, datetime.now(UTC))
        try:
            it = self.client.list_workflows(query, page_size=flt.page_size, next_page_token=token,
                                            rpc_timeout=RPC_TIMEOUT)
            await it.fetch_next_page(page_size=flt.page_size)
        except RPCError as err:
            raise ServiceUnavailableError(f"cannot list incidents: {err}") from err
        return Page(rows=[summary_of(wf) for wf in it.current_page or ()], next_token=it.next_page_token or None)

    async def all(self, flt: IncidentFilter, limit: int) -> list[IncidentSummary]:
        """Up to `limit` newest incidents matching the filter (nodes, jobs and goodput pages)."""
        rows: list[IncidentSummary] = []
        try:
            async for wf in self.client.list_workflows(visibility_query(flt, datetime.now(UTC)), limit=limit,
                                                       page_size=min(limit, 1000), rpc_timeout=RPC_TIMEOUT):
                rows.append(summary_of(wf))
        except RPCError as err:
            raise ServiceUnavailableError(f"cannot list incidents: {err}") from err
        return rows

    async def counts(self, flt: IncidentFilter) -> dict[str, int]:
        """Incidents per state under the filter (ignoring its own state), by count queries."""
        base = visibility_query(flt.model_copy(update={"state": None}), datetime.now(UTC))
        counts: dict[str, int] = {}
        try:
            for state in IncidentState:
                found = await self.client.count_workflows(f"{base} AND {search.STATE.name} = '{state.value}'",
                                                          rpc_timeout=RPC_TIMEOUT)
                counts[state.value] = found.count
        except RPCError as err:
            raise ServiceUnavailableError(f"cannot count incidents: {err}") from err
        return counts

    async def reports(self, incident_ids: Sequence[str], timeout_s: float = 3.0,
                      concurrency: int = 16) -> dict[str, IncidentReport | None]:
        """Many incidents' reports at once, each given `timeout_s`: a running incident whose
        workers are down cannot answer its query, and one such must not hold up a page of many
        (None for it; the page says so)."""
        gate = asyncio.Semaphore(concurrency)

        async def one(incident_id: str) -> IncidentReport | None:
            async with gate:
                try:
                    return await asyncio.wait_for(self.service.get(incident_id), timeout_s)
                except (ServiceError, TimeoutError):
                    return None

        found = await asyncio.gather(*(one(i) for i in incident_ids))
        return dict(zip(incident_ids, found, strict=True))

    async def steps(self, incident_id: str) -> list[ActivityStep]:
        """The incident's activities from its workflow history, with retries counted."""
        handle = self.client.get_workflow_handle(incident_id)
        try:
            history = await handle.fetch_history(rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            raise ServiceUnavailableError(f"cannot read the history of {incident_id}: {err}") from err
        scheduled: dict[int, tuple[str, datetime]] = {}
        attempts: dict[int, int] = {}
        ended: dict[int, tuple[str, datetime]] = {}
        for event in history.events:
            at = event.event_time.ToDatetime(tzinfo=UTC)
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled[event.event_id] = (event.activity_task_scheduled_event_attributes.activity_type.name, at)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                started = event.activity_task_started_event_attributes
                attempts[started.scheduled_event_id] = started.attempt
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                ended[event.activity_task_completed_event_attributes.scheduled_event_id] = ("completed", at)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
                ended[event.activity_task_failed_event_attributes.scheduled_event_id] = ("failed", at)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
                ended[event.activity_task_timed_out_event_attributes.scheduled_event_id] = ("timed out", at)
        steps = []
        for event_id, (name, at) in scheduled.items():
            outcome, end = ended.get(event_id, ("running", None))
            steps.append(ActivityStep(name=name, scheduled_at=at, attempts=attempts.get(event_id, 0),
                                      seconds=None if end is None else (end - at).total_seconds(), outcome=outcome))
        return steps
