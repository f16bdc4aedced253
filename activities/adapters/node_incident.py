"""The real NodeIncidents: update-with-start on the node's NodeIncidentWorkflow.

As for the drain breaker and the node memory, update-with-start creates the node incident on the
fault's first link and asks it in one round trip, so two job incidents that fail on the same node
at the same moment meet in the same workflow: Temporal runs their updates one after the other.
A node incident that ended (its window passed) is started afresh: a new fault.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from goodput.recover.node_incident import LinkAnswer, LinkRequest, node_incident_id
from workflows.node_incident import NodeIncidentStart, NodeIncidentWorkflow


class TemporalNodeIncidents:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def link(self, request: LinkRequest) -> LinkAnswer:
        start = WithStartWorkflowOperation(
            NodeIncidentWorkflow.run, NodeIncidentStart(cluster=request.cluster, node=request.node,
                                                        policy=request.policy),
            id=node_incident_id(request.cluster, request.node), task_queue=self._task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        return await self._client.execute_update_with_start_workflow(
            NodeIncidentWorkflow.link, request, start_workflow_operation=start, rpc_timeout=timedelta(seconds=30))
