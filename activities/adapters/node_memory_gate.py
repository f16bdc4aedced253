"""The real NodeMemory: update-with-start on the cluster's NodeMemoryWorkflow.

As for the drain breaker, update-with-start creates the cluster's memory on first use and asks
it in one round trip, so nothing has to be installed per cluster beforehand.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from goodput.diagnose.node_memory import MemoryVerdict, NodeMemoryPolicy, Observation
from workflows.node_memory import ConsultRequest, NodeMemoryStart, NodeMemoryWorkflow, node_memory_workflow_id


class TemporalNodeMemory:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def consult(self, cluster: str, observation: Observation, policy: NodeMemoryPolicy) -> MemoryVerdict:
        start = WithStartWorkflowOperation(
            NodeMemoryWorkflow.run, NodeMemoryStart(cluster=cluster, policy=policy),
            id=node_memory_workflow_id(cluster), task_queue=self._task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        return await self._client.execute_update_with_start_workflow(
            NodeMemoryWorkflow.consult, ConsultRequest(observation=observation, policy=policy),
            start_workflow_operation=start, rpc_timeout=timedelta(seconds=30))
