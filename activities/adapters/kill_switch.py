"""The real kill switch: the cluster's KillSwitchWorkflow, read by query and flipped by update.

Reading is a query, so consulting the switch before every action adds nothing to the switch's
history; a cluster whose switch was never touched has no workflow, which reads as released.
Flipping is update-with-start, so the first `goodput kill-switch on` creates it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from activities.adapters.entity_query import query_or_empty
from goodput.models import OperatorDecision
from goodput.recover.kill_switch import KillSwitchState
from workflows.kill_switch import KillSwitchRequest, KillSwitchStart, KillSwitchWorkflow, kill_switch_workflow_id

RPC_TIMEOUT = timedelta(seconds=30)


class TemporalKillSwitch:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def read(self, cluster: str) -> KillSwitchState:
        return await query_or_empty(self._client, kill_switch_workflow_id(cluster), KillSwitchWorkflow.status,
                                    KillSwitchState())

    async def set(self, cluster: str, engaged: bool, by: OperatorDecision) -> KillSwitchState:
        start = WithStartWorkflowOperation(
            KillSwitchWorkflow.run, KillSwitchStart(cluster=cluster), id=kill_switch_workflow_id(cluster),
            task_queue=self._task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
        return await self._client.execute_update_with_start_workflow(
            KillSwitchWorkflow.set, KillSwitchRequest(engaged=engaged, by=by), start_workflow_operation=start,
            rpc_timeout=RPC_TIMEOUT)
