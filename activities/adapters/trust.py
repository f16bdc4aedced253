"""The real track record: update-with-start on the cluster's TrustRecordWorkflow.

As for node memory, update-with-start creates the cluster's record on first use and asks it in
one round trip; reading (`goodput trust`) is a query, and a cluster whose record was never
written reads as empty. Every incident reports to it, so reports made while one is in flight go
together as the next update (activities.adapters.update_batch): a storm of 100 incidents was
refused ~19 times per incident by Temporal's 10 in-flight updates per workflow (#29).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import partial

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from activities.adapters.entity_query import query_or_empty
from activities.adapters.update_batch import UpdateBatcher
from goodput.models import Mode, OperatorDecision
from goodput.recover.trust import AutonomyPolicy, RuleAutonomy, RuleSummary, TrustEvent
from workflows.trust import NoteBatch, NoteRequest, PinRequest, TrustRecordWorkflow, TrustStart, trust_workflow_id

RPC_TIMEOUT = timedelta(seconds=30)


class TemporalTrustRecord:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue
        self._batchers: dict[str, UpdateBatcher[NoteRequest, RuleAutonomy]] = {}

    def _start(self, cluster: str, bar: AutonomyPolicy) -> WithStartWorkflowOperation[TrustRecordWorkflow, None]:
        return WithStartWorkflowOperation(
            TrustRecordWorkflow.run, TrustStart(cluster=cluster, bar=bar), id=trust_workflow_id(cluster),
            task_queue=self._task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)

    async def note(self, cluster: str, event: TrustEvent, bar: AutonomyPolicy | None) -> RuleAutonomy:
        if cluster not in self._batchers:
            self._batchers[cluster] = UpdateBatcher(partial(self._send, cluster))
        return await self._batchers[cluster].ask(NoteRequest(event=event, bar=bar))

    async def _send(self, cluster: str, requests: Sequence[NoteRequest]) -> tuple[RuleAutonomy, ...]:
        # The record is created with the first request's bar; each request is judged by its own.
        return await self._client.execute_update_with_start_workflow(
            TrustRecordWorkflow.note_many, NoteBatch(requests=tuple(requests)),
            start_workflow_operation=self._start(cluster, requests[0].bar or AutonomyPolicy()),
            rpc_timeout=RPC_TIMEOUT)

    async def pin(self, cluster: str, rule: str, mode: Mode | None, by: OperatorDecision,
                  bar: AutonomyPolicy) -> RuleAutonomy:
        return await self._client.execute_update_with_start_workflow(
            TrustRecordWorkflow.pin, PinRequest(rule=rule, mode=mode, by=by, bar=bar),
            start_workflow_operation=self._start(cluster, bar), rpc_timeout=RPC_TIMEOUT)

    async def read(self, cluster: str) -> tuple[RuleSummary, ...]:
        return await query_or_empty(self._client, trust_workflow_id(cluster), TrustRecordWorkflow.summaries, ())
