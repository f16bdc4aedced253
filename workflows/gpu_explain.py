"""A straggler or hang anomaly explained by the agents' GPU samples, for a sink outside the liveness process.

Sinks are not workflows and cannot schedule an activity, yet only the liveness process holds the
samples (`activities.gpu_evidence`). This short workflow runs on that process's own task queue and
hands back the anomaly with its GPUs' evidence; the sink waits for it a few seconds at most and
otherwise submits the anomaly unchanged (workers.gpu_feed). It keeps no state and is never
signalled, so it has no patches: a change to it changes only explanations not yet asked for.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from goodput.models import Anomaly

EXPLAIN_TIMEOUT = timedelta(seconds=8)


@workflow.defn(name="GpuExplainWorkflow")
class GpuExplainWorkflow:
    @workflow.run
    async def run(self, anomaly: Anomaly) -> Anomaly:
        found: Anomaly = await workflow.execute_activity(
            "explain_gpus", anomaly, result_type=Anomaly, start_to_close_timeout=EXPLAIN_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=1))
        return found
