"""Temporal-backed sink and launcher for the watchers, and starting the cluster watcher.

The sink is the same signal-with-start path `goodput inject` uses, with the service's policy;
the launcher starts one `JobWatchWorkflow` per job attempt and treats "already started" (or
already finished) as done, so every scan can ask again safely.
"""

from __future__ import annotations

import contextlib
import logging

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from goodput.models import Anomaly
from goodput.policy import Policy
from goodput.watch import WatchClusterInput, WatchJobInput
from workers.client import TemporalIncidentService
from workflows.watch import ClusterWatchWorkflow, JobWatchWorkflow, cluster_watch_id, job_watch_id

log = logging.getLogger("goodput.watch")


class IncidentSink:
    def __init__(self, service: TemporalIncidentService, policy: Policy) -> None:
        self._service = service
        self._policy = policy

    async def submit(self, anomaly: Anomaly) -> None:
        result = await self._service.inject(anomaly, self._policy)
        if result.note:
            log.info("anomaly %s for %s: %s", anomaly.id, result.incident_id, result.note)


class TemporalWatchLauncher:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def launch(self, request: WatchJobInput) -> None:
        job = request.job
        # Already started, or already finished for this attempt: either way it is watched.
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self._client.start_workflow(
                JobWatchWorkflow.run, request, id=job_watch_id(request.cluster, job.job_id, job.restart_count),
                task_queue=self._task_queue, id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)


async def start_cluster_watch(client: Client, task_queue: str, request: WatchClusterInput) -> str:
    handle = await client.start_workflow(
        ClusterWatchWorkflow.run, request, id=cluster_watch_id(request.cluster), task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    return handle.id
