"""`capture_stacks`: a hang incident asks the node agents for stack dumps and waits, bounded.

The request goes into the service's in-memory `StackRequestTable` (the heartbeat endpoint in this
same process hands it to the agents; `workers.stack_requests`), so the activity runs on the queue
only that process polls (`workers.liveness_worker`; incidents from before the "liveness-queue"
patch still ask on the shared queue), for the nodes Slurm lists for the
job now, and only for a running job the opt-in rule admits: never a node or a job named by the
job's own output. The activity then waits until every node answered or `wait_s` passed,
heartbeating, and returns the evidence (`goodput.detect.stack_requests.evidence`): a line per
node, and the odd process out where the dumps show one. Nothing here fails an incident: a job
Slurm no longer runs, a worker without the heartbeat endpoint, a node that never answers, each
becomes a note or an evidence line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from goodput.detect.stack_requests import (
    StackCaptureInput,
    StackCaptureResult,
    StackRequestTable,
    evidence,
    request_id,
)
from goodput.detect.watch import OptInRule
from goodput.scheduler import JobState, Scheduler, SchedulerError

POLL_S = 0.25


def _utcnow() -> datetime:
    return datetime.now(UTC)


class StackActivities:
    """`capture_stacks`; `table` None (the heartbeat endpoint is off in this worker) asks nothing."""

    def __init__(self, scheduler: Scheduler, table: StackRequestTable | None, *, wait_s: float = 30.0,
                 opt_in: OptInRule | None = None, clock: Callable[[], datetime] = _utcnow) -> None:
        self._scheduler = scheduler
        self._table = table
        self._wait_s = wait_s
        self._opt_in = opt_in or OptInRule()
        self._clock = clock

    @activity.defn(name="capture_stacks")
    async def capture_stacks(self, request: StackCaptureInput) -> StackCaptureResult:
        if self._table is None:
            return StackCaptureResult(note="no stack dumps: the agents' heartbeat endpoint is not enabled "
                                           "([liveness] enabled = true)")
        try:
            job = await self._scheduler.get_job(request.job_id)
        except SchedulerError as err:
            return StackCaptureResult(note=f"no stack dumps: cannot read job {request.job_id} ({str(err)[:200]})")
        if job.state is not JobState.RUNNING or not job.nodes:
            return StackCaptureResult(note=f"no stack dumps: job {job.job_id} is {job.state}, not running")
        if not self._opt_in.admits(job):
            return StackCaptureResult(note=f"no stack dumps: job {job.job_id} is not opted in")
        rid = request_id(request.incident_id, job.job_id)
        asked = self._table.ask(rid, job.job_id, job.nodes, self._clock())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while not self._table.complete(rid) and loop.time() < deadline:
            activity.heartbeat()
            await asyncio.sleep(min(POLL_S, max(0.0, deadline - loop.time())))
        # Reading up to 20,000 dump lines is CPU work: off the loop that serves the heartbeats.
        found = await asyncio.to_thread(evidence, asked, self._table.answers(rid), self._wait_s)
        return StackCaptureResult(evidence=found, asked=asked.nodes)

    def all(self) -> list[Callable[..., Awaitable[Any]]]:
        return [self.capture_stacks]
