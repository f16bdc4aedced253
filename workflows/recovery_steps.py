"""The recovery workflow's machinery: running a step, moving the state, recording, auditing.

RecoveryWorkflow (workflows.recovery) decides what happens to an incident; this base class holds
how each step happens, so that file reads as the recovery's story: an activity run so that an
operator's cancel cancels it in flight, a failure turned into an escalation with its reason,
timeline and state moves, notifications that never fail a recovery, the audit trail around each
action, the kill switch and the hand-over of drained nodes to their return to service. Its state
lives on the workflow instance (set up in RecoveryWorkflow.__init__).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from goodput.checkpoints import LostWork
    from goodput.models import Anomaly, Mode
    from goodput.recover.audit import AuditAction
    from goodput.recover.incident import (
        AttributeResult,
        Decision,
        DecisionVerb,
        NodeHealthRequest,
        Notification,
        RecoveryStart,
        TimelineEvent,
    )
    from goodput.recover.kill_switch import KillSwitchState
    from goodput.recover.lifecycle import OUTCOME_OF, IncidentState, is_terminal, transition
    from workflows import search
    from workflows.audit_trail import AuditTrail

S = IncidentState
T = TypeVar("T")

STEP_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                         maximum_interval=timedelta(seconds=30), maximum_attempts=10)
STEP_TIMEOUT = timedelta(seconds=120)
HEARTBEAT_TIMEOUT = timedelta(seconds=5)


class Escalation(Exception):
    """A step failed for good; the incident goes to a person with the reason."""


class CancelledByOperator(Exception):
    """An operator cancelled while a step was in flight; the step was cancelled too."""


class RecoverySteps:
    _start: RecoveryStart
    _state: IncidentState
    _mode: Mode
    _decision: Decision | None
    _timeline: list[TimelineEvent]
    _attributed: AttributeResult | None
    _actions_done: list[str]
    _audit: AuditTrail
    _lost_work: LostWork | None
    _anomalies: list[Anomaly]
    _node_incidents: list[str]

    @property
    def _id(self) -> str:
        return workflow.info().workflow_id

    def _cancel_requested(self) -> bool:
        return self._decision is not None and self._decision.verb is DecisionVerb.CANCEL

    def _cancelled_here(self) -> bool:
        if self._cancel_requested() and not is_terminal(self._state):
            assert self._decision is not None
            self._move(S.CANCELLED, f"cancelled by {self._decision.by.who}: {self._decision.by.reason}")
            return True
        return is_terminal(self._state)

    async def _wait(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        try:
            await workflow.wait_condition(condition, timeout=timedelta(seconds=timeout_s))
        except TimeoutError:
            return False
        return True

    def _record(self, state: IncidentState, detail: str) -> None:
        self._timeline.append(TimelineEvent(at=workflow.now(), state=state, detail=detail))

    def _move(self, target: IncidentState, detail: str) -> None:
        if target is not self._state:
            self._state = transition(self._state, target)
        self._record(target, detail)
        if is_terminal(target):
            self._upsert()

    async def _audited(self, action: AuditAction, nodes: tuple[str, ...], reason: str, step: Awaitable[T],
                       outcome: Callable[[T], str]) -> T:
        """Runs one action step with its audit record (added before the step, its result filled in
        after, so a failed or cancelled action is recorded too), then writes it to the log."""
        if not workflow.patched("audit-trail"):
            return await step
        index = self._audit.add(self._start.key, self._mode, action, nodes=nodes, reason=reason, result="started")
        try:
            done = await step
        except (Escalation, CancelledByOperator) as failed:
            self._audit.settle(index, f"failed: {failed}" if isinstance(failed, Escalation)
                               else "cancelled by an operator")
            raise
        self._audit.settle(index, outcome(done))
        await self._flush_audit()
        return done

    async def _return_to_service(self, nodes: tuple[str, ...]) -> None:
        """Hands the nodes this incident drained to their return-to-service workflows."""
        policy = self._start.policy.return_to_service
        if not nodes or not policy.enabled or not workflow.patched("return-to-service"):
            return
        try:
            spares = self._start.policy.spares
            await self._step("start_node_health", NodeHealthRequest(
                cluster=self._start.key.cluster, nodes=nodes, incident_id=self._id, policy=policy,
                spares=spares if spares.enabled and spares.target_size else None), type(None))
        except Escalation as why:  # the drain stands; only its automatic return is missing
            self._record(self._state, f"return to service not started: {why}")
            return
        self._done(f"{', '.join(nodes)}: back in service after {policy.quarantine_s:.0f} s and a passed "
                   "health check, if the drain is still goodput's")

    async def _kill_switch(self) -> KillSwitchState:
        return await self._step("consult_kill_switch", self._start.key.cluster, KillSwitchState)

    async def _flush_audit(self) -> None:
        why_not = await self._audit.flush()
        if why_not:
            self._record(self._state, why_not)

    def _observed_at(self) -> datetime | None:
        """When the failure was first observable: where the action-latency metric starts."""
        return min((a.observed_at for a in self._anomalies), default=None)

    def _done(self, detail: str) -> None:
        self._actions_done.append(detail)
        self._record(self._state, detail)

    def _upsert(self) -> None:
        if not self._start.index:
            return
        search.upsert(self._start.key, self._state, self._mode, self._attributed, OUTCOME_OF.get(self._state),
                      self._node_incidents)

    async def _notify(self, summary: str) -> None:
        try:
            await self._step("notify", Notification(
                incident_id=self._id, state=self._state, summary=summary,
                category=self._attributed.attribution.category if self._attributed else None,
                lost_work=self._lost_work), type(None))
        except Escalation as why:
            # A broken chat webhook must not turn a recovered incident into an escalated one.
            self._record(self._state, f"notification failed: {why}")

    async def _step(self, name: str, arg: object, result_type: type[T],
                    timeout: timedelta = STEP_TIMEOUT) -> T:
        """Run one activity; an operator's cancel cancels it in flight (activities heartbeat)."""
        handle = workflow.start_activity(
            name, arg, result_type=result_type, start_to_close_timeout=timeout,
            heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=STEP_RETRY)
        await workflow.wait_condition(lambda: handle.done() or self._cancel_requested())
        if not handle.done() and name != "notify":
            handle.cancel()
        try:
            result: T = await handle
            return result
        except ActivityError as err:
            if self._cancel_requested():
                raise CancelledByOperator from err
            cause = err.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            raise Escalation(f"step {name} failed: {message}") from err
