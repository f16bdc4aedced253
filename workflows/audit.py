"""An incident's audit records, kept in workflow state and written to the audit log by an activity.

Records are built in workflow code (`workflow.now()`, ids counted per incident) so they are part
of the incident's deterministic state (RecoveryState.audit): `IncidentReport.audit` carries them,
and replaying a workflow history rebuilds them exactly. Writing them to the durable log is an activity, retried
like any step; when it fails for good the records still stand in the report (and the timeline
says the log missed them), because an audit write must never stop a recovery. Signal handlers
(an operator's approve or cancel) only add records; the next flush writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from goodput.models import IncidentKey, Mode
    from goodput.recover.audit import GOODPUT_ACTOR, AuditAction, AuditRecord
    from goodput.recover.incident import AuditInput

_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                     maximum_interval=timedelta(seconds=30), maximum_attempts=10)
_CLIP = 2000


async def write_audit(records: tuple[AuditRecord, ...], *, local: bool = False) -> str | None:
    """Appends records to the audit log through the `audit` activity (retried like any step);
    why not, when it failed for good. Every workflow that audits writes through here: what it
    audits already stands in its own history, so a log that cannot be written never fails it.
    `local`: run inside the workflow task (an append to a file), one round trip fewer."""
    try:
        if local:
            await workflow.execute_local_activity("audit", AuditInput(records=records),
                                                  start_to_close_timeout=timedelta(seconds=60), retry_policy=_RETRY)
        else:
            await workflow.execute_activity("audit", AuditInput(records=records),
                                            start_to_close_timeout=timedelta(seconds=60), retry_policy=_RETRY)
    except ActivityError as err:
        return f"audit log not written ({err.cause or err})"
    return None


def audit_record(number: int, key: IncidentKey, mode: Mode, action: AuditAction, *, actor: str = GOODPUT_ACTOR,
                 nodes: tuple[str, ...] = (), reason: str = "", result: str = "", origin: str = "") -> AuditRecord:
    """The incident's `number`th record (from 1), stamped in workflow time; the workflow keeps it
    in its state (goodput.recover.recovery_state) and writes it with `write_audit`."""
    incident_id = workflow.info().workflow_id
    return AuditRecord(
        id=f"{incident_id}#{number}", at=workflow.now(), actor=actor[:160], action=action,
        incident_id=incident_id, cluster=key.cluster, job_id=key.job_id, nodes=nodes,
        reason=reason[:_CLIP], result=result[:_CLIP], mode=str(mode), origin=origin)


def settled(record: AuditRecord, result: str) -> AuditRecord:
    """The record once its action's result is known."""
    return record.model_copy(update={"result": result[:_CLIP]})


@dataclass
class AuditQueue:
    """An entity workflow's changes not yet in the audit log, and how many it made this run.
    Handlers append (they cannot run activities); the run loop writes (`write_until_due`)."""

    pending: list[AuditRecord] = field(default_factory=list)
    changes: int = 0


async def write_until_due(queue: AuditQueue, limit: int, what: str) -> None:
    """The run loop of an entity workflow that audits its changes: writes each batch of pending
    records as it comes, and returns once the run should continue as new (after `limit` changes,
    or when Temporal suggests it), with every handler finished."""
    def due() -> bool:
        return queue.changes >= limit or workflow.info().is_continue_as_new_suggested()

    while True:
        await workflow.wait_condition(lambda: bool(queue.pending) or due())
        while queue.pending:
            records, queue.pending = tuple(queue.pending), []
            why_not = await write_audit(records)
            if why_not:
                workflow.logger.warning("%s: %s", what, why_not)
        if due():
            await workflow.wait_condition(workflow.all_handlers_finished)
            return
