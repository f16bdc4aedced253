"""The real track record: update-with-start on the cluster's TrustRecordWorkflow.

As for node memory, update-with-start creates the cluster's record on first use and asks it in
one round trip; reading (`goodput trust`) is a query, and a cluster whose record was never
written reads as empty.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from activities.adapters.entity_query import query_or_empty
from goodput.models import Mode, OperatorDecision
from goodput.recover.trust import AutonomyPolicy, RuleAutonomy, RuleSummary, TrustEvent
from workflows.trust import NoteRequest, PinRequest, TrustRecordWorkflow, TrustStart, trust_workflow_id

RPC_TIMEOUT = timedelta(seconds=30)


class TemporalTrustRecord:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    def _start(self, cluster: str, bar: AutonomyPolicy) -> WithStartWorkflowOperation[TrustRecordWorkflow, None]:
        return WithStartWorkflowOperation(
            TrustRecordWorkflow.run, TrustStart(cluster=cluster, bar=bar), id=trust_workflow_id(cluster),
            task_queue=self._task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)

    async def note(self, cluster: str, event: TrustEvent, bar: AutonomyPolicy | None) -> RuleAutonomy:
        return await self._client.execute_update_with_start_workflow(
            TrustRecordWorkflow.note, NoteRequest(event=event, bar=bar),
            start_workflow_operation=self._start(cluster, bar or AutonomyPolicy()), rpc_timeout=RPC_TIMEOUT)

    async def pin(self, cluster: str, rule: str, mode: Mode | None, by: OperatorDecision,
                  bar: AutonomyPolicy) -> RuleAutonomy:
        return await self._client.execute_update_with_start_workflow(
            TrustRecordWorkflow.pin, PinRequest(rule=rule, mode=mode, by=by, bar=bar),
            start_workflow_operation=self._start(cluster, bar), rpc_timeout=RPC_TIMEOUT)

    async def read(self, cluster: str) -> tuple[RuleSummary, ...]:
        return await query_or_empty(self._client, trust_workflow_id(cluster), TrustRecordWorkflow.summaries, ())
