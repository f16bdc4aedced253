"""DrainBreakerWorkflow: one long-lived entity workflow per cluster that rations drains.

Recovery workflows ask it for permission (an update, through the `reserve_drain` activity's
update-with-start) before isolating nodes. Being a workflow, its count survives every crash and
its decisions are in history. It continues-as-new to keep that history short, and takes the
service's breaker policy as it does (`breaker_policy`: the settings and Slurm's switch map now),
so a changed limit or topology reaches a breaker that outlives the workers that started it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from pydantic import Field

    from goodput.models import Frozen, OperatorDecision
    from goodput.recover.audit import GOODPUT_ACTOR, AuditAction, AuditRecord
    from goodput.recover.breaker import (
        BreakerPolicy,
        BreakerState,
        DrainRequest,
        DrainVerdict,
        decide,
        reset,
    )
    from workflows.audit import write_audit
    from workflows.update_batch import check_batch

CONTINUE_AS_NEW_AFTER = 500


class BreakerStart(Frozen):
    cluster: str
    policy: BreakerPolicy = BreakerPolicy()
    state: BreakerState = BreakerState()
    # Decisions per run before it continues as new (tests set it low to see a continuation).
    continue_as_new_after: int = Field(default=CONTINUE_AS_NEW_AFTER, ge=1)


class DrainBatch(Frozen):
    """Several incidents' drain requests in one update (activities.adapters.update_batch)."""

    requests: tuple[DrainRequest, ...]


def breaker_workflow_id(cluster: str) -> str:
    return f"drain-breaker-{cluster}"


@workflow.defn
class DrainBreakerWorkflow:
    @workflow.init
    def __init__(self, start: BreakerStart) -> None:
        self._start = start
        self._state = start.state
        self._decisions = 0
        # Trips and resets for the audit log, written by the run loop (handlers cannot run activities).
        self._pending: list[AuditRecord] = []
        self._audits = 0

    @workflow.run
    async def run(self, start: BreakerStart) -> None:
        while True:
            await workflow.wait_condition(
                lambda: bool(self._pending) or self._decisions >= start.continue_as_new_after
                or workflow.info().is_continue_as_new_suggested())
            if self._pending and workflow.patched("audit-breaker"):
                records, self._pending = tuple(self._pending), []
                why_not = await write_audit(records)
                if why_not:
                    workflow.logger.warning("breaker change: %s", why_not)
                continue
            self._pending.clear()
            if self._decisions >= start.continue_as_new_after or workflow.info().is_continue_as_new_suggested():
                break
        policy = start.policy
        if workflow.patched("breaker-policy-refresh"):
            policy = await self._service_policy(start)
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(start.model_copy(update={"state": self._state, "policy": policy}))

    async def _service_policy(self, start: BreakerStart) -> BreakerPolicy:
        """The breaker policy of the service now (its settings, Slurm's switch map), so that a change
        reaches the breaker at its next run; the one it ran with when the service cannot say."""
        try:
            policy: BreakerPolicy = await workflow.execute_activity(
                "breaker_policy", start.cluster, result_type=BreakerPolicy,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1)))
            return policy
        except ActivityError as exc:
            workflow.logger.warning("breaker policy not refreshed, the last one is kept: %s", exc)
            return start.policy

    @workflow.update
    def reserve(self, request: DrainRequest) -> DrainVerdict:
        return self._reserve(request)

    def _reserve(self, request: DrainRequest) -> DrainVerdict:
        trips, groups = self._state.trips, set(self._state.tripped_groups)
        self._state, verdict = decide(self._state, request, workflow.now(), self._start.policy)
        self._decisions += 1
        if self._state.trips > trips or (verdict.group and verdict.group not in groups):
            self._audit(GOODPUT_ACTOR, AuditAction.BREAKER_TRIP, request.incident_id, request.nodes,
                        verdict.reason, "drains refused until the window passes or an operator resets it")
        return verdict

    @workflow.update
    def reserve_many(self, batch: DrainBatch) -> tuple[DrainVerdict, ...]:
        """`reserve` for each request in order: the same verdicts as one update each."""
        return tuple(self._reserve(request) for request in batch.requests)

    @reserve_many.validator
    def _bounded(self, batch: DrainBatch) -> None:
        check_batch(len(batch.requests), "requests")

    @workflow.signal
    def reset(self, decision: OperatorDecision) -> None:
        workflow.logger.info("breaker reset by %s: %s", decision.who, decision.reason)
        self._state = reset(self._state)
        self._audit(f"operator:{decision.who}", AuditAction.BREAKER_RESET, "", (), decision.reason, "drains allowed",
                    decision.origin)

    def _audit(self, actor: str, action: AuditAction, incident_id: str, nodes: tuple[str, ...], reason: str,
               result: str, origin: str = "") -> None:
        info = workflow.info()
        self._audits += 1
        self._pending.append(AuditRecord(
            id=f"{info.workflow_id}#{info.run_id}#{self._audits}",
            at=workflow.now(), actor=actor[:160], action=action, incident_id=incident_id,
            cluster=self._start.cluster, job_id="", nodes=nodes, reason=reason[:2000], result=result,
            origin=origin))

    @workflow.query
    def status(self) -> BreakerState:
        return self._state
