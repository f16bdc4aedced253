"""DrainBreakerWorkflow: one long-lived entity workflow per cluster that rations drains.

Recovery workflows ask it for permission (an update, through the `reserve_drain` activity's
update-with-start) before isolating nodes. Being a workflow, its count survives every crash and
its decisions are in history. It continues-as-new to keep that history short.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.models import Frozen, OperatorDecision
    from goodput.recover.breaker import (
        BreakerPolicy,
        BreakerState,
        DrainRequest,
        DrainVerdict,
        decide,
        reset,
    )

CONTINUE_AS_NEW_AFTER = 500


class BreakerStart(Frozen):
    cluster: str
    policy: BreakerPolicy = BreakerPolicy()
    state: BreakerState = BreakerState()


def breaker_workflow_id(cluster: str) -> str:
    return f"drain-breaker-{cluster}"


@workflow.defn
class DrainBreakerWorkflow:
    @workflow.init
    def __init__(self, start: BreakerStart) -> None:
        self._start = start
        self._state = start.state
        self._decisions = 0

    @workflow.run
    async def run(self, start: BreakerStart) -> None:
        await workflow.wait_condition(
            lambda: self._decisions >= CONTINUE_AS_NEW_AFTER or workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(start.model_copy(update={"state": self._state}))

    @workflow.update
    def reserve(self, request: DrainRequest) -> DrainVerdict:
        self._state, verdict = decide(self._state, request, workflow.now(), self._start.policy)
        self._decisions += 1
        return verdict

    @workflow.signal
    def reset(self, decision: OperatorDecision) -> None:
        workflow.logger.info("breaker reset by %s: %s", decision.who, decision.reason)
        self._state = reset(self._state)

    @workflow.query
    def status(self) -> BreakerState:
        return self._state
