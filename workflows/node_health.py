"""NodeHealthWorkflow: one durable workflow per node goodput drained, until it is back or a person decides.

Started (signal-with-start) by the recovery workflow after each drain it made: the node sits out
its quarantine on a durable timer, then the site's health check runs against it (an activity);
passing, it is resumed, only while the drain is still the one it tracks (its incident's reason, or
a shared fault's the incident's drains carried: not an administrator's, nor goodput's for a later
incident, `return-own-drain`); failing too often, or drained
again too often, it is escalated and stays drained. After a return the workflow keeps watching
for the offence window, so a node that fails again soon counts as a repeat offender. The rules
are goodput.recover.node_health; every return is audited and every escalation notified.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from goodput.models import Frozen, OperatorDecision
    from goodput.recover.audit import AuditAction, AuditRecord
    from goodput.recover.incident import Notification
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.node_health import (
        CheckResult,
        NodeCheckInput,
        NodeHealthState,
        Phase,
        ReturnInput,
        ReturnResult,
        ReturnToServicePolicy,
        check_argv,
        checked,
        drained,
        return_refusal,
        return_requested,
    )
    from goodput.recover.spares import RefillInput, RefillResult, SparePolicy
    from goodput.recover.trust import Fate, RuleAutonomy, TrustEvent, TrustInput
    from workflows.audit import write_audit

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=60), maximum_attempts=10)


class NodeHealthStart(Frozen):
    cluster: str
    node: str
    incident_id: str
    policy: ReturnToServicePolicy
    # The hot-spare pool a returned node refills (goodput.recover.spares); None: no pool.
    spares: SparePolicy | None = None
    # The rule whose verdict drained the node (goodput.recover.trust); "" from older starts.
    rule: str = ""
    # The shared faults whose reason the incident's drains carried (goodput.recover.shared_fault).
    faults: tuple[str, ...] = ()


def node_health_workflow_id(cluster: str, node: str) -> str:
    return f"node-health-{cluster}-{node}"


@workflow.defn
class NodeHealthWorkflow:
    @workflow.init
    def __init__(self, start: NodeHealthStart) -> None:
        self._start = start
        self._state = NodeHealthState(cluster=start.cluster, node=start.node)
        self._drained_by: list[tuple[str, tuple[str, ...]]] = []  # (incident, its faults) per drain
        self._return_now = False
        self._records = 0

    @workflow.run
    async def run(self, start: NodeHealthStart) -> NodeHealthState:
        policy = start.policy
        self._state = drained(self._state, start.incident_id, workflow.now(), policy, start.faults)
        # Signal-with-start delivers the starting drain as a signal too: it is not a second offence.
        self._drained_by = [d for d in self._drained_by if d[0] != start.incident_id]
        while True:
            if self._state.phase is Phase.ESCALATED:
                await self._notify(IncidentState.ESCALATED, f"node {start.node}: {self._state.why}")
                return self._state
            wait = policy.quarantine_s if self._state.failures == 0 else policy.retry_after_s
            if await self._drained_again(wait):
                continue
            result = await self._check()
            self._state = checked(self._state, result, policy)
            if self._state.phase is not Phase.CHECKING:
                continue
            request = ReturnInput(cluster=start.cluster, node=start.node)
            if workflow.patched("return-own-drain"):
                if self._drained_by:  # goodput drained it again while it was checked: that drain's quarantine
                    continue
                # Only the drain this workflow tracks may be undone (goodput.recover.node_health.not_ours).
                request = request.model_copy(update={"incident_id": self._state.incident_id,
                                                      "faults": self._state.faults})
            back = await workflow.execute_activity(
                "return_node", request, result_type=ReturnResult,
                start_to_close_timeout=timedelta(seconds=120), retry_policy=RETRY)
            phase = Phase.RETURNED if back.returned else Phase.NOT_OURS
            self._state = self._state.model_copy(update={"phase": phase, "why": back.detail})
            if not back.returned:
                return self._state  # someone else's node now (or already resumed): not goodput's to watch
            await self._audit(back.detail)
            if start.rule and self._state.failures == 0 and workflow.patched("trust-false-drain"):
                await self._false_drain()
            refilled = await self._refill()
            await self._notify(IncidentState.RECOVERED, f"node {start.node} returned to service: {back.detail}"
                               + (f"; {refilled}" if refilled else ""))
            # A node that comes back and fails again soon is a repeat offender: keep counting.
            if not await self._drained_again(policy.offence_window_s):
                return self._state

    async def _false_drain(self) -> None:
        """The node passed its first health check after the drain: no fault found, a likely false
        drain, counted against the rule that drained it (goodput.recover.trust)."""
        event = TrustEvent(rule=self._start.rule, fate=Fate.FALSE_DRAIN, incident_id=self._start.incident_id,
                           at=workflow.now(), nodes=(self._start.node,))
        try:
            await workflow.execute_activity("consult_trust", TrustInput(cluster=self._start.cluster, event=event),
                                            result_type=RuleAutonomy, start_to_close_timeout=timedelta(seconds=60),
                                            retry_policy=RETRY)
        except ActivityError as err:
            workflow.logger.warning("false drain of %s not recorded: %s", self._start.node, err.cause or err)

    async def _refill(self) -> str:
        """A returned node joins the hot-spare pool while it is below its target size. Histories
        from before the pool (and runs without one) schedule nothing here."""
        spares = self._start.spares
        if spares is None or not spares.enabled or not workflow.patched("hot-spare-refill"):
            return ""
        try:
            done = await workflow.execute_activity(
                "refill_spares", RefillInput(cluster=self._start.cluster, node=self._start.node, policy=spares),
                result_type=RefillResult, start_to_close_timeout=timedelta(seconds=120), retry_policy=RETRY)
        except ActivityError as err:  # the node is back in service either way
            return f"not added to pool {spares.reservation}: {err.cause or err}"[:500]
        self._state = self._state.model_copy(update={"why": f"{self._state.why}; {done.detail}"[:2000]})
        detail: str = done.detail
        return detail

    async def _drained_again(self, seconds: float) -> bool:
        """Waits `seconds`; True (and the offence counted) if goodput drained the node meanwhile.
        An operator's `request_return` ends the wait early (False: go on to the check)."""
        try:
            await workflow.wait_condition(lambda: bool(self._drained_by) or self._return_now,
                                          timeout=timedelta(seconds=seconds))
        except TimeoutError:
            return False
        if not self._drained_by:
            self._return_now = False
            return False
        incident, faults = self._drained_by.pop(0)
        self._state = drained(self._state, incident, workflow.now(), self._start.policy, faults)
        return True

    async def _check(self) -> CheckResult:
        policy = self._start.policy
        try:
            result: CheckResult = await workflow.execute_activity(
                "check_node", NodeCheckInput(argv=check_argv(policy.check_command, self._start.node),
                                             timeout_s=policy.check_timeout_s),
                result_type=CheckResult, start_to_close_timeout=timedelta(seconds=policy.check_timeout_s + 60),
                retry_policy=RetryPolicy(maximum_attempts=3))
        except ActivityError as err:
            return CheckResult(passed=False, detail=f"the health check could not run: {err.cause or err}"[:2000])
        return result

    async def _audit(self, result: str) -> None:
        self._records += 1
        info = workflow.info()
        record = AuditRecord(id=f"{info.workflow_id}#{info.run_id}#{self._records}", at=workflow.now(),
                             actor="goodput", action=AuditAction.UNDRAIN, incident_id=self._state.incident_id,
                             cluster=self._start.cluster, job_id="", nodes=(self._start.node,),
                             reason=self._return_reason()[:2000],
                             result=result[:2000])
        why_not = await write_audit((record,))
        if why_not:
            workflow.logger.warning("node return: %s", why_not)

    def _return_reason(self) -> str:
        asked = self._state.requested_by
        opening = f"return requested by {asked}" if asked else "quarantine over"
        return f"{opening} and health check passed: {self._state.last_check}"

    async def _notify(self, state: IncidentState, summary: str) -> None:
        try:
            await workflow.execute_activity(
                "notify", Notification(incident_id=self._state.incident_id or self._start.incident_id, state=state,
                                       summary=summary), start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RETRY)
        except ActivityError as err:
            workflow.logger.warning("node health notification failed: %s", err)

    @workflow.signal
    def drained_again(self, incident_id: str, faults: tuple[str, ...] = ()) -> None:
        """goodput drained the node for `incident_id`; `faults`: the shared reasons its drains
        carried (senders from before them send the incident alone)."""
        self._drained_by.append((incident_id, tuple(faults)))

    @workflow.update
    def request_return(self, by: OperatorDecision) -> str:
        """An operator ends the node's quarantine now (`goodput nodes return`); the health check
        still decides, and the return's audit record names who asked."""
        self._state = return_requested(self._state, by.who, by.reason)
        self._return_now = True
        return f"node {self._start.node}: quarantine ended by {by.who}; the health check runs now"

    @request_return.validator
    def _may_return(self, by: OperatorDecision) -> None:
        refusal = return_refusal(self._state)
        if refusal:
            raise ValueError(refusal)

    @workflow.query
    def status(self) -> NodeHealthState:
        return self._state
