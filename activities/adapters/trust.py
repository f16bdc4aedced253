"""The real track record: update-with-start on the cluster's TrustRecordWorkflow.

As for node memory, update-with-start creates the cluster's record on first use and asks it in
one round trip; reading (`goodput trust`) is a query, and a cluster whose record was never
written reads as empty. Every incident reports to it, so reports made while one is in flight go
together as the next update (activities.adapters.update_batch): a storm of 100 incidents was
refused ~19 times per incident by Temporal's 10 in-flight updates per workflow (#29).

A recommendation is answered from this worker's snapshot of the record where that is safe
(goodput.recover.trust_snapshot: never autonomy, never older than STALE_AFTER_S) and delivered as a
signal-with-start: durable once the call returns, and no wait for the record's workflow task,
which in a 500-job storm queued behind every incident's (#29, docs/scaling.md "The record from a
snapshot"). A new record starts on the entities' own queue (goodput.entity_lane).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from functools import partial

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from activities.adapters.entity_query import query_or_empty
from activities.adapters.update_batch import UpdateBatcher
from goodput.entity_lane import entity_queue
from goodput.models import Mode, OperatorDecision
from goodput.recover.trust import AutonomyPolicy, Fate, RuleAutonomy, RuleSummary, TrustEvent
from goodput.recover.trust_snapshot import STALE_AFTER_S, TrustSnapshot, answered, drops_snapshot
from workflows.trust import NoteBatch, NoteRequest, PinRequest, TrustRecordWorkflow, TrustStart, trust_workflow_id

RPC_TIMEOUT = timedelta(seconds=30)
# A refresh slower than this leaves the incident to the round trip rather than wait on.
QUERY_TIMEOUT = timedelta(seconds=STALE_AFTER_S)
log = logging.getLogger(__name__)


class _View:
    """One cluster's snapshot as this worker holds it, refreshed by one query at a time."""

    def __init__(self) -> None:
        self.snapshot: TrustSnapshot | None = None
        self.absent = False  # the record was never started: every rule's record is empty
        self.taken = float("-inf")  # when the query that read it was sent (monotonic)
        self.failed = float("-inf")  # when a refresh last failed
        self.generation = 0  # bumped when the record may have changed under the snapshot
        self.refreshing: asyncio.Task[None] | None = None

    def drop(self) -> None:
        self.snapshot, self.absent, self.taken = None, False, float("-inf")
        self.generation += 1


class TemporalTrustRecord:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue
        self._batchers: dict[str, UpdateBatcher[NoteRequest, RuleAutonomy]] = {}
        self._signallers: dict[str, UpdateBatcher[NoteRequest, None]] = {}
        self._views: dict[str, _View] = {}
        self.from_snapshot = 0  # recommendations answered from a snapshot (benchmarks read it)

    def _start(self, cluster: str, bar: AutonomyPolicy) -> WithStartWorkflowOperation[TrustRecordWorkflow, None]:
        return WithStartWorkflowOperation(
            TrustRecordWorkflow.run, TrustStart(cluster=cluster, bar=bar), id=trust_workflow_id(cluster),
            task_queue=entity_queue(self._task_queue), id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)

    async def note(self, cluster: str, event: TrustEvent, bar: AutonomyPolicy | None) -> RuleAutonomy:
        view = self._views.setdefault(cluster, _View())
        if event.fate is Fate.RECOMMENDED:
            snapshot = await self._snapshot(cluster, view, bar)
            answer = answered(snapshot, event, bar) if snapshot is not None else None
            if answer is not None:
                if cluster not in self._signallers:
                    self._signallers[cluster] = UpdateBatcher(partial(self._signal, cluster))
                await self._signallers[cluster].ask(NoteRequest(event=event, bar=bar))
                self.from_snapshot += 1
                return answer
        if cluster not in self._batchers:
            self._batchers[cluster] = UpdateBatcher(partial(self._send, cluster))
        answer = await self._batchers[cluster].ask(NoteRequest(event=event, bar=bar))
        if drops_snapshot(event):  # after the record has it: a refresh begun before must not count
            view.drop()
        return answer

    async def _snapshot(self, cluster: str, view: _View, bar: AutonomyPolicy | None) -> TrustSnapshot | None:
        """The cluster's snapshot if one no older than STALE_AFTER_S can be had; None otherwise
        (the record answers). Past half that age it is refreshed in the background; after a
        failed refresh the record answers for that long before the next is tried."""
        now = time.monotonic()
        idle = view.refreshing is None or view.refreshing.done()
        if now - view.taken > STALE_AFTER_S / 2 and idle and now - view.failed > STALE_AFTER_S / 2:
            view.refreshing = asyncio.create_task(self._refresh(cluster, view))
        if now - view.taken > STALE_AFTER_S and view.refreshing is not None:
            # Shielded: one incident's cancelled activity must not cancel everyone's refresh.
            await asyncio.shield(view.refreshing)
        if time.monotonic() - view.taken > STALE_AFTER_S:
            return None
        if view.absent:  # no record yet: every rule's is empty, judged by this incident's bar
            return TrustSnapshot(bar=bar or AutonomyPolicy())
        return view.snapshot

    async def _refresh(self, cluster: str, view: _View) -> None:
        generation, sent = view.generation, time.monotonic()
        try:
            snapshot = await query_or_empty(self._client, trust_workflow_id(cluster), TrustRecordWorkflow.standings,
                                            None, rpc_timeout=QUERY_TIMEOUT)
        except Exception:  # an old worker without the query, a timeout: the record answers meanwhile
            log.warning("track record snapshot of %s not refreshed", cluster, exc_info=True)
            view.failed = time.monotonic()
            return
        if generation == view.generation:
            view.snapshot, view.absent, view.taken = snapshot, snapshot is None, sent

    async def _signal(self, cluster: str, requests: Sequence[NoteRequest]) -> tuple[None, ...]:
        # Signal-with-start: the record is created as by the update if it was never started.
        await self._client.start_workflow(
            TrustRecordWorkflow.run, TrustStart(cluster=cluster, bar=requests[0].bar or AutonomyPolicy()),
            id=trust_workflow_id(cluster), task_queue=entity_queue(self._task_queue), start_signal="note_later",
            start_signal_args=[NoteBatch(requests=tuple(requests))], rpc_timeout=RPC_TIMEOUT)
        return (None,) * len(requests)

    async def _send(self, cluster: str, requests: Sequence[NoteRequest]) -> tuple[RuleAutonomy, ...]:
        # The record is created with the first request's bar; each request is judged by its own.
        return await self._client.execute_update_with_start_workflow(
            TrustRecordWorkflow.note_many, NoteBatch(requests=tuple(requests)),
            start_workflow_operation=self._start(cluster, requests[0].bar or AutonomyPolicy()),
            rpc_timeout=RPC_TIMEOUT)

    async def pin(self, cluster: str, rule: str, mode: Mode | None, by: OperatorDecision,
                  bar: AutonomyPolicy) -> RuleAutonomy:
        answer = await self._client.execute_update_with_start_workflow(
            TrustRecordWorkflow.pin, PinRequest(rule=rule, mode=mode, by=by, bar=bar),
            start_workflow_operation=self._start(cluster, bar), rpc_timeout=RPC_TIMEOUT)
        self._views.setdefault(cluster, _View()).drop()  # a pin through this process counts here at once
        return answer

    async def read(self, cluster: str) -> tuple[RuleSummary, ...]:
        return await query_or_empty(self._client, trust_workflow_id(cluster), TrustRecordWorkflow.summaries, ())
