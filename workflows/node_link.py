"""How a job incident isolates a node that a fault shares with other jobs: through its node incident.

The drain step (reserve through the cluster's breaker, drain, hand the node to its return to
service) runs once per node fault: the job incident that leads the node's incident
(workflows.node_incident) runs it and reports the outcome, the others join that outcome, or wait
for it, and then each goes on with its own recovery at once. In monitor mode an incident only
links itself, so the fault lists every job it hit. When the node incident cannot be reached, or
owes a decision for too long, the incident isolates the node on its own, as before the link: a
recovery never waits on its node incident beyond the isolation decision itself. The decisions
are goodput.recover.node_incident; a base class of RecoveryWorkflow, like RecoverySteps.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from goodput.models import RecoveryAction, RecoveryPlan
    from goodput.recover.audit import AuditAction
    from goodput.recover.breaker import DrainRequest, DrainVerdict
    from goodput.recover.incident import IsolateInput, IsolateResult, ReserveInput
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.node_incident import (
        Delivery,
        Isolation,
        IsolationReport,
        LinkAnswer,
        LinkRequest,
        Role,
        node_incident_id,
        refusal,
        shared_note,
    )
    from workflows.recovery_steps import CancelledByOperator, Escalation, RecoverySteps

S = IncidentState
# Past the node incident's own lead timeout: by then it has handed the lead on, or is gone.
LATE_S = 60.0


class Refused(Escalation):
    """The drain breaker said no: a decision every incident of the fault shares."""


def _drained(isolated: IsolateResult) -> str:
    return (f"drained {', '.join(isolated.drained) or 'nothing new'}"
            + (f"; already drained: {', '.join(isolated.already)}" if isolated.already else ""))


class NodeLinks(RecoverySteps):
    _plan: RecoveryPlan | None
    _node_answers: dict[str, LinkAnswer]

    @workflow.signal
    def node_decision(self, delivery: Delivery) -> None:
        """A node incident's decision (or the lead) this incident waits for."""
        self._node_answers.setdefault(delivery.node, delivery.answer)

    async def _isolate(self, action: RecoveryAction) -> None:
        if not self._start.policy.node_incident.enabled or not workflow.patched("node-incident"):
            await self._drain(action.nodes, action.reason)
            return
        answers: dict[str, LinkAnswer | None] = {}
        for node in action.nodes:
            try:
                answers[node] = await self._link(node, acts=True)
            except CancelledByOperator:
                await self._report((*(n for n, a in answers.items() if a is not None), node), None,
                                   "cancelled by an operator")
                raise
        # Lead first, wait after: two incidents that each lead one node and wait for the
        # other's never wait on each other.
        leading = tuple(n for n, a in answers.items() if a is None or a.role is Role.LEAD)
        if leading:
            await self._lead(leading, tuple(n for n in leading if answers[n] is not None), action.reason)
        for node, answer in answers.items():
            if answer is None or answer.role is Role.LEAD:
                continue
            if answer.role is Role.WAIT:
                answer = await self._decision_on(node)
                if answer is None or answer.role is Role.LEAD:
                    await self._lead((node,), (node,), action.reason)
                    continue
            why = refusal(node, answer)
            if why:
                raise Escalation(why)
            self._move(S.ISOLATING, shared_note(node, answer))

    async def _recommend(self) -> None:
        """Monitor mode: the incident acts on nothing, but the fault still lists it."""
        nodes = self._plan.nodes_to_drain() if self._plan else ()
        if not nodes or not self._start.policy.node_incident.enabled or not workflow.patched("node-incident"):
            return
        for node in dict.fromkeys(nodes):
            await self._link(node, acts=False)

    async def _link(self, node: str, *, acts: bool) -> LinkAnswer | None:
        """This incident's part in `node`'s fault; None when the node incident is unreachable."""
        attributed = self._attributed
        evidence = (f"job {self._start.key.job_id}: "
                    f"{attributed.attribution.explanation if attributed else 'not attributed'}",
                    *(line for a in self._anomalies[:3] for line in a.evidence[:1]))
        try:
            answer = await self._step("link_node_incident", LinkRequest(
                cluster=self._start.key.cluster, node=node, incident_id=self._id, job_id=self._start.key.job_id,
                acts=acts, mode=self._mode, evidence=evidence, policy=self._start.policy.node_incident), LinkAnswer)
        except Escalation as why:  # the link only coordinates: never a reason to fail the recovery
            self._record(self._state, f"node {node}: its node incident is unavailable ({why})"
                         + ("; isolating it on its own" if acts else ""))
            return None
        if answer.node_incident_id not in self._node_incidents:
            self._node_incidents.append(answer.node_incident_id)
            self._upsert()
        if answer.role is not Role.JOIN:  # a join is told once, as the isolation it stands for
            self._record(self._state, shared_note(node, answer))
        return answer

    async def _decision_on(self, node: str) -> LinkAnswer | None:
        """The fault's decision on `node`, or the lead handed to this incident; None when it
        did not come in time (the incident then isolates the node on its own)."""
        timeout = self._start.policy.node_incident.lead_timeout_s + LATE_S
        arrived = await self._wait(lambda: node in self._node_answers or self._cancel_requested(), timeout)
        if self._cancel_requested():
            await self._report((node,), None, "cancelled by an operator")
            raise CancelledByOperator
        if not arrived:
            self._record(self._state, f"node {node}: no decision from its node incident within {timeout:.0f} s; "
                                      "isolating it on its own")
            return None
        answer = self._node_answers.pop(node)
        if answer.role is Role.LEAD:
            self._record(self._state, shared_note(node, answer))
        return answer

    async def _lead(self, nodes: tuple[str, ...], linked: tuple[str, ...], reason: str) -> None:
        """Take the isolation decision on `nodes` and report it for those with a node incident."""
        try:
            isolated = await self._drain(nodes, reason)
        except Refused as why:
            await self._report(linked, Isolation.REFUSED, str(why))
            raise
        except Escalation as why:
            await self._report(linked, Isolation.FAILED, str(why))
            raise
        except CancelledByOperator:
            await self._report(linked, None, "cancelled by an operator")
            raise
        details = dict(zip(nodes, isolated.details, strict=False))
        for node in linked:
            drained = node in isolated.drained
            await self._report((node,), Isolation.DRAINED if drained else Isolation.ALREADY, details.get(node, ""))

    async def _report(self, nodes: tuple[str, ...], outcome: Isolation | None, detail: str) -> None:
        for node in nodes:
            target = node_incident_id(self._start.key.cluster, node)
            try:
                await workflow.get_external_workflow_handle(target).signal("decided", IsolationReport(
                    node=node, incident_id=self._id, outcome=outcome, detail=detail))
            except FailureError as err:  # its incidents wait out their timeout and decide alone
                self._record(self._state, f"node {node}: could not report to {target}: {err}")

    async def _drain(self, nodes: tuple[str, ...], reason: str) -> IsolateResult:
        """The isolation decision itself: the cluster's breaker, the drain, its audit record and
        the hand-over to return to service."""
        verdict = await self._step("reserve_drain", ReserveInput(
            cluster=self._start.key.cluster, policy=self._start.policy.breaker,
            request=DrainRequest(incident_id=self._id, nodes=nodes)), DrainVerdict)
        if not verdict.allowed:
            raise Refused(verdict.reason)
        self._move(S.ISOLATING, f"draining {', '.join(nodes)} ({verdict.reason})")
        isolated = await self._audited(AuditAction.DRAIN, nodes, reason, self._step(
            "isolate", IsolateInput(incident_id=self._id, nodes=nodes, summary=reason,
                                    observed_at=self._observed_at()),
            IsolateResult), _drained)
        self._done(_drained(isolated))
        await self._return_to_service(isolated.drained)
        return isolated
