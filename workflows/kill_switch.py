"""KillSwitchWorkflow: one long-lived entity workflow per cluster holding the kill switch.

Being a workflow, the switch survives every crash and each change (who, when, why) is in its
history; each change is also written to the audit log by the `audit` activity. Operators flip it
with an update (the CLI, the console); recovery workflows read it through the
`consult_kill_switch` activity. It continues-as-new to keep its history short.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.models import Frozen, OperatorDecision
    from goodput.recover.audit import AuditAction, AuditRecord
    from goodput.recover.kill_switch import KillSwitchState, switch
    from workflows.audit import AuditQueue, write_until_due

CONTINUE_AS_NEW_AFTER = 200


class KillSwitchStart(Frozen):
    cluster: str
    state: KillSwitchState = KillSwitchState()


class KillSwitchRequest(Frozen):
    engaged: bool
    by: OperatorDecision


def kill_switch_workflow_id(cluster: str) -> str:
    return f"kill-switch-{cluster}"


@workflow.defn
class KillSwitchWorkflow:
    @workflow.init
    def __init__(self, start: KillSwitchStart) -> None:
        self._start = start
        self._state = start.state
        self._audit_queue = AuditQueue()

    @workflow.run
    async def run(self, start: KillSwitchStart) -> None:
        await write_until_due(self._audit_queue, CONTINUE_AS_NEW_AFTER, "kill switch change")
        workflow.continue_as_new(start.model_copy(update={"state": self._state}))

    @workflow.update
    def set(self, request: KillSwitchRequest) -> KillSwitchState:
        self._state = switch(self._state, request.engaged, request.by, workflow.now())
        self._audit_queue.changes += 1
        cluster = self._start.cluster
        self._audit_queue.pending.append(AuditRecord(
            id=f"{workflow.info().workflow_id}#{workflow.info().run_id}#{self._audit_queue.changes}", at=workflow.now(),
            actor=f"operator:{request.by.who}"[:160],
            action=AuditAction.KILL_SWITCH_ON if request.engaged else AuditAction.KILL_SWITCH_OFF,
            incident_id="", cluster=cluster, job_id="", reason=request.by.reason, origin=request.by.origin,
            result=("every partition of " + cluster + " in monitor mode") if request.engaged
            else ("partitions of " + cluster + " back to their configured modes")))
        return self._state

    @workflow.query
    def status(self) -> KillSwitchState:
        return self._state
