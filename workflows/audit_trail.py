"""An incident's audit records, kept in workflow state and written to the audit log by an activity.

Records are built in workflow code (`workflow.now()`, ids counted per incident) so they are part
of the incident's deterministic state: `IncidentReport.audit` carries them, and replaying a
workflow history rebuilds them exactly. Writing them to the durable log is an activity, retried
like any step; when it fails for good the records still stand in the report (and the timeline
says the log missed them), because an audit write must never stop a recovery. Signal handlers
(an operator's approve or cancel) only add records; the next flush writes them.
"""

from __future__ import annotations

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


async def write_audit(records: tuple[AuditRecord, ...]) -> str | None:
    """Appends records to the audit log through the `audit` activity (retried like any step);
    why not, when it failed for good. Every workflow that audits writes through here: what it
    audits already stands in its own history, so a log that cannot be written never fails it."""
    try:
        await workflow.execute_activity("audit", AuditInput(records=records),
                                        start_to_close_timeout=timedelta(seconds=60), retry_policy=_RETRY)
    except ActivityError as err:
        return f"audit log not written ({err.cause or err})"
    return None


class AuditTrail:
    def __init__(self) -> None:
        self.records: list[AuditRecord] = []
        self._written = 0

    def add(self, key: IncidentKey, mode: Mode, action: AuditAction, *, actor: str = GOODPUT_ACTOR,
            nodes: tuple[str, ...] = (), reason: str = "", result: str = "", origin: str = "") -> int:
        """Adds a record; its index, for `settle` once the action's result is known."""
        incident_id = workflow.info().workflow_id
        self.records.append(AuditRecord(
            id=f"{incident_id}#{len(self.records) + 1}", at=workflow.now(), actor=actor[:160], action=action,
            incident_id=incident_id, cluster=key.cluster, job_id=key.job_id, nodes=nodes,
            reason=reason[:_CLIP], result=result[:_CLIP], mode=str(mode), origin=origin))
        return len(self.records) - 1

    def settle(self, index: int, result: str) -> None:
        self.records[index] = self.records[index].model_copy(update={"result": result[:_CLIP]})

    async def flush(self) -> str | None:
        """Writes the records not yet in the log; says why not when the log could not be written."""
        pending = tuple(self.records[self._written:])
        if not pending or not workflow.patched("audit-trail"):
            return None
        why_not = await write_audit(pending)
        if why_not:
            return f"{why_not}; the records stay in this incident's report"
        self._written += len(pending)
        return None
