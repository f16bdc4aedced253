"""The real DrainGate: update-with-start on the cluster's DrainBreakerWorkflow.

Update-with-start creates the breaker on first use and asks it in one round trip, so no
process has to "install" a breaker per cluster beforehand. Requests made while one is in flight
go together as the next update (activities.adapters.update_batch: Temporal's limit of 10
in-flight updates per workflow).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import partial

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from activities.adapters.update_batch import UpdateBatcher
from goodput.recover.breaker import BreakerPolicy, DrainRequest, DrainVerdict
from workflows.breaker import BreakerStart, DrainBatch, DrainBreakerWorkflow, breaker_workflow_id


class TemporalDrainGate:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue
        self._batchers: dict[tuple[str, BreakerPolicy], UpdateBatcher[DrainRequest, DrainVerdict]] = {}

    async def reserve(self, cluster: str, request: DrainRequest, policy: BreakerPolicy) -> DrainVerdict:
        key = (cluster, policy)
        if key not in self._batchers:
            self._batchers[key] = UpdateBatcher(partial(self._send, cluster, policy))
        return await self._batchers[key].ask(request)

    async def _send(self, cluster: str, policy: BreakerPolicy,
                    requests: Sequence[DrainRequest]) -> tuple[DrainVerdict, ...]:
        start = WithStartWorkflowOperation(
            DrainBreakerWorkflow.run, BreakerStart(cluster=cluster, policy=policy),
            id=breaker_workflow_id(cluster), task_queue=self._task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        return await self._client.execute_update_with_start_workflow(
            DrainBreakerWorkflow.reserve_many, DrainBatch(requests=tuple(requests)), start_workflow_operation=start,
            rpc_timeout=timedelta(seconds=30))
