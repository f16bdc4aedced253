"""The real DrainGate: update-with-start on the cluster's DrainBreakerWorkflow.

Update-with-start creates the breaker on first use and asks it in one round trip, so no
process has to "install" a breaker per cluster beforehand.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from goodput.recover.breaker import BreakerPolicy, DrainRequest, DrainVerdict
from workflows.breaker import BreakerStart, DrainBreakerWorkflow, breaker_workflow_id


class TemporalDrainGate:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def reserve(self, cluster: str, request: DrainRequest, policy: BreakerPolicy) -> DrainVerdict:
        start = WithStartWorkflowOperation(
            DrainBreakerWorkflow.run, BreakerStart(cluster=cluster, policy=policy),
            id=breaker_workflow_id(cluster), task_queue=self._task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        return await self._client.execute_update_with_start_workflow(
            DrainBreakerWorkflow.reserve, request, start_workflow_operation=start,
            rpc_timeout=timedelta(seconds=30))
