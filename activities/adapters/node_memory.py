"""The real NodeMemory: update-with-start on the cluster's NodeMemoryWorkflow.

As for the drain breaker, update-with-start creates the cluster's memory on first use and asks
it in one round trip, so nothing has to be installed per cluster beforehand. Consultations made
while one is in flight go together as the next update (activities.adapters.update_batch), up to
MAX_BATCH of them and MEMORY_MAX_BYTES: an observation names its job's every node. A count of 500
instead of 100 was tried for the 500-job storm, which fills batches of 100, and did not help
(#29, docs/scaling.md "The record from a snapshot"). A new memory starts on the entities' own
queue (goodput.entity_lane); one started before that keeps its queue until it continues as new.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import partial

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from activities.adapters.update_batch import UpdateBatcher
from goodput.diagnose.node_memory import MemoryVerdict, NodeMemoryPolicy, Observation
from goodput.entity_lane import entity_queue
from workflows.node_memory import (
    ConsultBatch,
    ConsultRequest,
    NodeMemoryStart,
    NodeMemoryWorkflow,
    node_memory_workflow_id,
)
from workflows.update_batch import MEMORY_MAX_BYTES


def _bytes(request: ConsultRequest) -> int:
    return len(request.model_dump_json())


class TemporalNodeMemory:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue
        self._batchers: dict[str, UpdateBatcher[ConsultRequest, MemoryVerdict]] = {}

    async def consult(self, cluster: str, observation: Observation, policy: NodeMemoryPolicy) -> MemoryVerdict:
        if cluster not in self._batchers:
            self._batchers[cluster] = UpdateBatcher(partial(self._send, cluster), weigh=_bytes,
                                                    max_bytes=MEMORY_MAX_BYTES)
        return await self._batchers[cluster].ask(ConsultRequest(observation=observation, policy=policy))

    async def _send(self, cluster: str, requests: Sequence[ConsultRequest]) -> tuple[MemoryVerdict, ...]:
        # The memory is created with the first request's policy; each request is judged by its own.
        start = WithStartWorkflowOperation(
            NodeMemoryWorkflow.run, NodeMemoryStart(cluster=cluster, policy=requests[0].policy),
            id=node_memory_workflow_id(cluster), task_queue=entity_queue(self._task_queue),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        return await self._client.execute_update_with_start_workflow(
            NodeMemoryWorkflow.consult_many, ConsultBatch(requests=tuple(requests)),
            start_workflow_operation=start, rpc_timeout=timedelta(seconds=30))
