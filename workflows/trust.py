"""TrustRecordWorkflow: one long-lived entity workflow per cluster holding each rule's track record.

Recovery workflows report each recommendation, the operator's decision on it and its outcome
(the `consult_trust` activity's update-with-start) and get back the rule's autonomy
(goodput.recover.trust); a recommendation a worker could answer from its snapshot (the
`standings` query; goodput.recover.trust_snapshot) arrives as the `note_later` signal instead.
Operators pin a rule with an update (`goodput trust pin`). Being a workflow, the record survives
every crash and its every change is in history; each change of a rule's autonomy (earned, lost,
pinned) is also written to the audit log. `goodput trust` reads it with a query. It
continues-as-new to keep its history short; what it carries is bounded per rule and in rules
(goodput.recover.trust).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import Field

    from goodput.models import Frozen, Mode, OperatorDecision
    from goodput.recover.audit import GOODPUT_ACTOR, AuditAction, AuditRecord
    from goodput.recover.trust import (
        AutonomyPolicy,
        LevelChange,
        RuleAutonomy,
        RuleSummary,
        TrustEvent,
        TrustState,
        note,
        pinned,
        standing_of,
        summary,
    )
    from goodput.recover.trust_snapshot import TrustSnapshot
    from workflows.audit import AuditQueue, write_until_due
    from workflows.entity_lane import next_run_queue
    from workflows.update_batch import MAX_BATCH, check_batch

CONTINUE_AS_NEW_AFTER = 500


class TrustStart(Frozen):
    cluster: str
    bar: AutonomyPolicy = AutonomyPolicy()
    state: TrustState = TrustState()


class NoteRequest(Frozen):
    event: TrustEvent
    # The reporting incident's bar: an incident is judged by the policy it started with. None:
    # the bar the record last used (return to service reports without an incident's policy).
    bar: AutonomyPolicy | None = None


class NoteBatch(Frozen):
    """Several incidents' reports in one update (activities.adapters.update_batch), as for node memory."""

    requests: tuple[NoteRequest, ...]


class PinRequest(Frozen):
    rule: str = Field(min_length=1, max_length=200)
    mode: Mode | None  # None: unpinned, back to what its record earns
    by: OperatorDecision
    bar: AutonomyPolicy = AutonomyPolicy()


def trust_workflow_id(cluster: str) -> str:
    return f"trust-record-{cluster}"


@workflow.defn
class TrustRecordWorkflow:
    @workflow.init
    def __init__(self, start: TrustStart) -> None:
        self._start = start
        self._state = start.state
        self._bar = start.bar
        self._audit_queue = AuditQueue()

    @workflow.run
    async def run(self, start: TrustStart) -> None:
        await write_until_due(self._audit_queue, CONTINUE_AS_NEW_AFTER, "rule autonomy change")
        workflow.continue_as_new(start.model_copy(update={"state": self._state, "bar": self._bar}),
                                 task_queue=next_run_queue())

    @workflow.update
    def note(self, request: NoteRequest) -> RuleAutonomy:
        return self._note(request)

    def _note(self, request: NoteRequest) -> RuleAutonomy:
        self._bar = request.bar or self._bar
        self._state, changes = note(self._state, request.event, self._bar, workflow.now())
        self._audit(changes, incident_id=request.event.incident_id)
        return standing_of(self._state.get(request.event.rule), self._bar, workflow.now())

    @workflow.update
    def note_many(self, batch: NoteBatch) -> tuple[RuleAutonomy, ...]:
        """`note` for each request in order: the same answers as one update each."""
        return tuple(self._note(request) for request in batch.requests)

    @note_many.validator
    def _bounded(self, batch: NoteBatch) -> None:
        check_batch(len(batch.requests), "reports")

    @workflow.signal
    def note_later(self, batch: NoteBatch) -> None:
        """`note_many` whose answers nobody waits for: recommendations a worker answered from its
        snapshot (goodput.recover.trust_snapshot). A signal is durable once sent, so none is lost;
        one past the batch bound is refused here as the update's validator would (none is sent).
        Behind `trust-snapshot`: a task that a worker without this handler ran (a rolling upgrade)
        left the signal unhandled, and must replay so on every later worker."""
        if not workflow.patched("trust-snapshot"):
            return
        if len(batch.requests) > MAX_BATCH:
            workflow.logger.warning("a batch of %d reports ignored: at most %d", len(batch.requests), MAX_BATCH)
            return
        for request in batch.requests:
            self._note(request)

    @workflow.update
    def pin(self, request: PinRequest) -> RuleAutonomy:
        self._bar = request.bar
        self._state, changes = pinned(self._state, request.rule, request.mode, request.by, request.bar,
                                      workflow.now())
        self._audit(changes)
        return standing_of(self._state.get(request.rule), request.bar, workflow.now())

    @workflow.query
    def summaries(self) -> tuple[RuleSummary, ...]:
        return tuple(summary(r, self._bar, workflow.now()) for r in sorted(self._state.rules, key=lambda r: r.rule))

    @workflow.query
    def standings(self) -> TrustSnapshot:
        """Every rule's autonomy now under the record's bar, for a worker's snapshot."""
        return TrustSnapshot(bar=self._bar, rules=tuple(standing_of(r, self._bar, workflow.now())
                                                        for r in self._state.rules))

    def _audit(self, changes: tuple[LevelChange, ...], incident_id: str = "") -> None:
        self._audit_queue.changes += 1
        for change in changes:
            if change.before is None and change.by is None:
                continue  # a rule's first recommendation starts its record; nothing was taken or given
            self._audit_queue.pending.append(AuditRecord(
                id=f"{workflow.info().workflow_id}#{workflow.info().run_id}#{self._audit_queue.changes}#{change.rule}"[:300],
                at=workflow.now(), actor=f"operator:{change.by.who}"[:160] if change.by else GOODPUT_ACTOR,
                action=_action(change), incident_id=incident_id, cluster=self._start.cluster, job_id="",
                reason=(change.by.reason if change.by else change.why)[:2000],
                origin=change.by.origin if change.by else "",
                result=f"rule {change.rule}: {change.before or 'new'} -> {change.after} ({change.why})"[:2000],
                mode=str(change.after)))


def _action(change: LevelChange) -> AuditAction:
    if change.by is not None:
        return AuditAction.AUTONOMY_PINNED
    return AuditAction.AUTONOMY_EARNED if change.after is Mode.AUTONOMOUS else AuditAction.AUTONOMY_LOST
