"""NodeIncidentWorkflow: one durable workflow per node fault, linking every job incident it hit.

A job incident whose plan drains a node links itself here (an update, through the
`link_node_incident` activity's update-with-start, which creates the node incident on the fault's
first link) and learns its part: lead the isolation decision, join the one made, or wait for it.
The leader reports its decision with the `decided` signal, and every incident waiting for it
gets it back as a `node_decision` signal, so no incident holds an activity open while it waits.
The drain itself stays the leading job incident's (breaker, audit trail and return to service
exactly as for any drain). The rules are goodput.recover.node_incident; this workflow only keeps
the state durable and delivers what the rules say is owed. It ends after a window with no new
link (its result is the fault, for `goodput faults`), and continues-as-new in a long storm.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from goodput.models import Frozen
    from goodput.recover.node_incident import (
        Delivery,
        IsolationReport,
        LinkAnswer,
        LinkRequest,
        NodeIncidentPolicy,
        NodeIncidentState,
        Role,
        ended,
        lapse,
        next_wake,
        settle,
    )
    from goodput.recover.node_incident import link as link_to

CONTINUE_AS_NEW_AFTER = 500
# The job incident's signal for a decision (or the lead) owed to it (workflows.node_link).
DECISION_SIGNAL = "node_decision"


class NodeIncidentStart(Frozen):
    cluster: str
    node: str
    policy: NodeIncidentPolicy = NodeIncidentPolicy()
    state: NodeIncidentState | None = None


@workflow.defn
class NodeIncidentWorkflow:
    @workflow.init
    def __init__(self, start: NodeIncidentStart) -> None:
        self._start = start
        self._state = start.state or NodeIncidentState(cluster=start.cluster, node=start.node)
        self._outbox: list[Delivery] = []
        self._changes = 0

    @workflow.run
    async def run(self, start: NodeIncidentStart) -> NodeIncidentState:
        policy = start.policy
        while True:
            self._state, owed = lapse(self._state, workflow.now(), policy)
            self._outbox.extend(owed)
            if self._outbox:
                await self._deliver()
                continue
            if ended(self._state, workflow.now(), policy) or self._changes >= CONTINUE_AS_NEW_AFTER \
                    or workflow.info().is_continue_as_new_suggested():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._outbox:
                    continue  # a report arrived meanwhile: deliver first
                if ended(self._state, workflow.now(), policy):
                    return self._state
                if self._changes >= CONTINUE_AS_NEW_AFTER or workflow.info().is_continue_as_new_suggested():
                    workflow.continue_as_new(start.model_copy(update={"state": self._state}))
                continue
            await self._changed_or(next_wake(self._state, policy))

    async def _changed_or(self, wake: datetime | None) -> None:
        """Until a link or a report changes the state, or `wake` comes."""
        seen = self._changes
        timeout = timedelta(seconds=max((wake - workflow.now()).total_seconds(), 0.001)) if wake else None
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self._changes != seen, timeout=timeout)

    async def _deliver(self) -> None:
        owed, self._outbox = self._outbox, []
        for delivery in owed:
            try:
                await workflow.get_external_workflow_handle(delivery.incident_id).signal(DECISION_SIGNAL, delivery)
            except FailureError as err:
                workflow.logger.info("node incident: %s is closed (%s)", delivery.incident_id, err)
                if delivery.answer.role is Role.LEAD:  # a closed incident cannot decide: the next one may
                    self._state, more = settle(self._state, IsolationReport(
                        node=delivery.node, incident_id=delivery.incident_id), workflow.now())
                    self._outbox.extend(more)

    @workflow.update
    def link(self, request: LinkRequest) -> LinkAnswer:
        self._state, answer = link_to(self._state, request, workflow.now(), self._start.policy)
        self._changes += 1
        return answer

    @workflow.signal
    def decided(self, report: IsolationReport) -> None:
        self._state, owed = settle(self._state, report, workflow.now())
        self._outbox.extend(owed)
        self._changes += 1

    @workflow.query
    def status(self) -> NodeIncidentState:
        return self._state
