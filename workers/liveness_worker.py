"""The liveness process's own worker: the activities that read or write the agents' in-memory stores.

The stack request table and the GPU sample store live in the process that serves the agents'
heartbeat endpoint; under the Helm chart that is its own pod. Besides the shared task queue that
process polls `<task_queue>-liveness` (goodput.detect.liveness_route), and only it: `capture_stacks`
and `explain_gpus` run there, so an incident or a sink in any other process reaches the stores.
`goodput up` and a `goodput worker` with `[liveness]` on run it beside their shared-queue worker,
so a single process serves both queues as before.

`RemoteGpuExplainer` is the other side for sinks: a process without the samples asks the liveness
process, through `workflows.gpu_explain`, when one polls the queue, and not at all when none does.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker

from activities.adapters.liveness_queue import TemporalLivenessPresence
from activities.gpu_evidence import GpuEvidenceActivities
from activities.liveness_route import LivenessPresence
from activities.stack_requests import StackActivities
from goodput.detect.gpu_feed import GpuSampleStore
from goodput.detect.liveness_route import liveness_queue
from goodput.detect.stack_requests import StackRequestTable
from goodput.detect.watch import OptInRule
from goodput.models import Anomaly
from goodput.scheduler import Scheduler
from workflows.gpu_explain import GpuExplainWorkflow

REMOTE_EXPLAIN_TIMEOUT_S = 10.0
# The sink waits on the detection path: after a liveness process that did not answer (gone, still
# listed by Temporal), the anomalies of the next minute go on without asking it.
QUIET_AFTER_TIMEOUT_S = 60.0


def build_liveness_worker(client: Client, task_queue: str, scheduler: Scheduler, *,
                          stacks: StackRequestTable | None, gpu_samples: GpuSampleStore | None,
                          stack_wait_s: float = 30.0, opt_in: OptInRule | None = None) -> Worker:
    """The worker on `<task_queue>-liveness`, for a process that holds the stores."""
    activities = [*StackActivities(scheduler, stacks, wait_s=stack_wait_s, opt_in=opt_in).all()]
    if gpu_samples is not None:
        activities += GpuEvidenceActivities(gpu_samples, scheduler).all()
    return Worker(client, task_queue=liveness_queue(task_queue), workflows=[GpuExplainWorkflow],
                  activities=activities, max_concurrent_activities=512,
                  graceful_shutdown_timeout=timedelta(seconds=5))


class RemoteGpuExplainer:
    """An anomaly explained by the liveness process's samples; None when no process holds them."""

    def __init__(self, client: Client, task_queue: str, *, presence: LivenessPresence | None = None,
                 timeout_s: float = REMOTE_EXPLAIN_TIMEOUT_S) -> None:
        self._client = client
        self._queue = liveness_queue(task_queue)
        self._presence = presence or TemporalLivenessPresence(client, task_queue)
        self._timeout_s = timeout_s
        self._quiet_until = 0.0

    async def __call__(self, anomaly: Anomaly) -> Anomaly | None:
        loop = asyncio.get_running_loop()
        if loop.time() < self._quiet_until or not await self._presence.served():
            return None
        try:
            return await asyncio.wait_for(self._client.execute_workflow(
                GpuExplainWorkflow.run, anomaly, id=f"gpu-explain-{uuid.uuid4().hex}", task_queue=self._queue,
                execution_timeout=timedelta(seconds=self._timeout_s)), self._timeout_s)
        except TimeoutError:
            self._quiet_until = loop.time() + QUIET_AFTER_TIMEOUT_S
            raise
