"""Watcher workflows: durable homes for the long-running watcher activities.

`JobWatchWorkflow` (one per job attempt) and `ClusterWatchWorkflow` (one per cluster) each run one
heartbeating activity with unlimited retries: a worker that dies hands its watchers to the
survivors after the heartbeat timeout, and the activity resumes from its last heartbeat.
"""

from __future__ import annotations

import re
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from goodput.detect.watch import WatchClusterInput, WatchJobInput, WatchJobResult

WATCH_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                          maximum_interval=timedelta(seconds=10))
WATCH_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
LONG = timedelta(days=365)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text)


def job_watch_id(cluster: str, job_id: str, attempt: int) -> str:
    return f"watch-job-{_safe(cluster)}-{_safe(job_id)}-{attempt}"


def cluster_watch_id(cluster: str) -> str:
    return f"watch-cluster-{_safe(cluster)}"


@workflow.defn
class JobWatchWorkflow:
    @workflow.run
    async def run(self, request: WatchJobInput) -> WatchJobResult:
        result: WatchJobResult = await workflow.execute_activity(
            "watch_job_logs", request, result_type=WatchJobResult, start_to_close_timeout=LONG,
            heartbeat_timeout=WATCH_HEARTBEAT_TIMEOUT, retry_policy=WATCH_RETRY)
        return result


@workflow.defn
class ClusterWatchWorkflow:
    @workflow.run
    async def run(self, request: WatchClusterInput) -> None:
        await workflow.execute_activity(
            "watch_scheduler", request, start_to_close_timeout=LONG,
            heartbeat_timeout=timedelta(seconds=30), retry_policy=WATCH_RETRY)
