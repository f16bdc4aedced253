"""`explain_gpus`: a straggler or hang anomaly explained by the agents' GPU samples of the job's nodes.

The samples are in the memory of the process that serves the agents' feed (`[liveness]`), so this
activity runs only on that process's own task queue (`goodput.detect.liveness_route`); a sink in
any other process reaches it through `workflows.gpu_explain`. `explained_by` is also what a sink in
the liveness process itself calls directly. The job's nodes are Slurm's, read now, never the log's;
a job that moved on to another attempt keeps its anomaly unchanged (its nodes now are not those the
anomaly saw).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from goodput.detect.gpu_explain import explain
from goodput.detect.gpu_feed import GpuSampleStore
from goodput.models import Anomaly
from goodput.scheduler import Scheduler

JOB_LOOKUP_TIMEOUT_S = 5.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def explained_by(store: GpuSampleStore, scheduler: Scheduler, anomaly: Anomaly, now: datetime, *,
                       timeout_s: float = JOB_LOOKUP_TIMEOUT_S) -> Anomaly:
    """The anomaly with the GPUs' evidence of its job's nodes; raises when Slurm cannot be read."""
    job = await asyncio.wait_for(scheduler.get_job(anomaly.job_id), timeout_s)
    if job.restart_count != anomaly.job_attempt:
        return anomaly
    return explain(anomaly, job.nodes, store.windows(job.nodes, now), now)


class GpuEvidenceActivities:
    """`explain_gpus`, registered only where `store` is: the liveness process's own queue."""

    def __init__(self, store: GpuSampleStore, scheduler: Scheduler, *,
                 clock: Callable[[], datetime] = _utcnow) -> None:
        self._store, self._scheduler, self._clock = store, scheduler, clock

    @activity.defn(name="explain_gpus")
    async def explain_gpus(self, anomaly: Anomaly) -> Anomaly:
        if not len(self._store):
            return anomaly
        return await explained_by(self._store, self._scheduler, anomaly, self._clock())

    def all(self) -> list[Callable[..., Awaitable[Any]]]:
        return [self.explain_gpus]
