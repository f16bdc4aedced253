"""How a job incident isolates a node that a fault shares with other jobs: through its node incident.

The drain step (reserve through the cluster's breaker, drain, hand the node to its return to
service) runs once per node fault: the job incident that leads the node's incident
(workflows.node_incident) runs it and reports the outcome, the others join that outcome, or wait
for it, and then each goes on with its own recovery at once. In monitor mode an incident only
links itself, so the fault lists every job it hit. When the node incident cannot be reached, or
owes a decision for too long, the incident isolates the node on its own, as before the link: a
recovery never waits on its node incident beyond the isolation decision itself. The decisions
are goodput.recover.node_incident; these are step functions of RecoveryWorkflow
(workflows.recovery_steps), which changes the incident's state on their behalf.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from goodput.models import RecoveryAction
    from goodput.recover.audit import AuditAction
    from goodput.recover.breaker import DrainRequest, DrainVerdict
    from goodput.recover.incident import IsolateInput, IsolateResult, NodeHealthRequest, ReserveInput
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.node_incident import (
        Isolation,
        IsolationReport,
        LinkAnswer,
        LinkRequest,
        Role,
        node_incident_id,
        refusal,
        shared_note,
    )
    from goodput.recover.recovery_rules import drained_note, leading, link_evidence, observed_at
    from workflows.recovery_steps import CancelledByOperator, Escalation, Incident

S = IncidentState
# Past the node incident's own lead timeout: by then it has handed the lead on, or is gone.
LATE_S = 60.0


class Refused(Escalation):
    """The drain breaker said no: a decision every incident of the fault shares."""


async def isolate(wf: Incident, action: RecoveryAction) -> None:
    """The plan's drain: decided here, or by the node's fault for every job it hit."""
    if not wf.start.policy.node_incident.enabled or not (wf.straight or workflow.patched("node-incident")):
        await drain(wf, action.nodes, action.reason)
        return
    answers: dict[str, LinkAnswer | None] = {}
    for node in action.nodes:
        try:
            answers[node] = await link(wf, node, acts=True)
        except CancelledByOperator:
            await _report(wf, (*(n for n, a in answers.items() if a is not None), node), None,
                          "cancelled by an operator")
            raise
    # Lead first, wait after: two incidents that each lead one node and wait for the
    # other's never wait on each other.
    leads = leading(answers)
    if leads:
        await _lead(wf, leads, tuple(n for n in leads if answers[n] is not None), action.reason)
    for node, answer in answers.items():
        if answer is not None and answer.role is not Role.LEAD:
            await _abide(wf, node, answer, action.reason)


async def _abide(wf: Incident, node: str, answer: LinkAnswer, reason: str) -> None:
    """Joins the fault's decision on `node`, waiting for it first when it is still being taken."""
    if answer.role is Role.WAIT:
        decided = await _decision_on(wf, node)
        if decided is None or decided.role is Role.LEAD:
            await _lead(wf, (node,), (node,), reason)
            return
        answer = decided
    why = refusal(node, answer)
    if why:
        raise Escalation(why)
    wf.move(S.ISOLATING, shared_note(node, answer))


async def recommend(wf: Incident) -> None:
    """Monitor mode: the incident acts on nothing, but the fault still lists it."""
    plan = wf.incident.plan
    nodes = plan.nodes_to_drain() if plan else ()
    if not nodes or not wf.start.policy.node_incident.enabled or not (wf.straight or workflow.patched("node-incident")):
        return
    for node in dict.fromkeys(nodes):
        await link(wf, node, acts=False)


async def link(wf: Incident, node: str, *, acts: bool) -> LinkAnswer | None:
    """This incident's part in `node`'s fault; None when the node incident is unreachable."""
    s, key = wf.incident, wf.start.key
    try:
        answer = await wf.step("link_node_incident", LinkRequest(
            cluster=key.cluster, node=node, incident_id=wf.id, job_id=key.job_id, acts=acts, mode=s.mode,
            evidence=link_evidence(key, s.attributed, s.anomalies), policy=wf.start.policy.node_incident),
            LinkAnswer)
    except Escalation as why:  # the link only coordinates: never a reason to fail the recovery
        wf.record(s.state, f"node {node}: its node incident is unavailable ({why})"
                  + ("; isolating it on its own" if acts else ""))
        return None
    wf.linked(answer.node_incident_id)
    if answer.role is not Role.JOIN:  # a join is told once, as the isolation it stands for
        wf.record(s.state, shared_note(node, answer))
    return answer


async def _decision_on(wf: Incident, node: str) -> LinkAnswer | None:
    """The fault's decision on `node`, or the lead handed to this incident; None when it
    did not come in time (the incident then isolates the node on its own)."""
    timeout = wf.start.policy.node_incident.lead_timeout_s + LATE_S
    arrived = await wf.wait(lambda: node in wf.incident.node_answers or wf.cancel_requested(), timeout)
    if wf.cancel_requested():
        await _report(wf, (node,), None, "cancelled by an operator")
        raise CancelledByOperator
    if not arrived:
        wf.record(wf.incident.state, f"node {node}: no decision from its node incident within {timeout:.0f} s; "
                                     "isolating it on its own")
        return None
    answer = wf.node_answer(node)
    if answer is not None and answer.role is Role.LEAD:
        wf.record(wf.incident.state, shared_note(node, answer))
    return answer


async def _lead(wf: Incident, nodes: tuple[str, ...], linked: tuple[str, ...], reason: str) -> None:
    """Take the isolation decision on `nodes` and report it for those with a node incident."""
    try:
        isolated = await drain(wf, nodes, reason)
    except Refused as why:
        await _report(wf, linked, Isolation.REFUSED, str(why))
        raise
    except Escalation as why:
        await _report(wf, linked, Isolation.FAILED, str(why))
        raise
    except CancelledByOperator:
        await _report(wf, linked, None, "cancelled by an operator")
        raise
    details = dict(zip(nodes, isolated.details, strict=False))
    for node in linked:
        drained = node in isolated.drained
        await _report(wf, (node,), Isolation.DRAINED if drained else Isolation.ALREADY, details.get(node, ""))


async def _report(wf: Incident, nodes: tuple[str, ...], outcome: Isolation | None, detail: str) -> None:
    for node in nodes:
        target = node_incident_id(wf.start.key.cluster, node)
        try:
            await workflow.get_external_workflow_handle(target).signal("decided", IsolationReport(
                node=node, incident_id=wf.id, outcome=outcome, detail=detail))
        except FailureError as err:  # its incidents wait out their timeout and decide alone
            wf.record(wf.incident.state, f"node {node}: could not report to {target}: {err}")


async def drain(wf: Incident, nodes: tuple[str, ...], reason: str) -> IsolateResult:
    """The isolation decision itself: the cluster's breaker, the drain, its audit record and
    the hand-over to return to service."""
    verdict = await wf.step("reserve_drain", ReserveInput(
        cluster=wf.start.key.cluster, policy=wf.start.policy.breaker,
        request=DrainRequest(incident_id=wf.id, nodes=nodes)), DrainVerdict)
    if not verdict.allowed and verdict.group and (wf.straight or workflow.patched("switch-limit-approval")):
        # Past a switch's or rack's limit the drain is a person's call, not a refusal for good.
        await wf.approval_past_limit(verdict.reason)
        verdict = await wf.step("reserve_drain", ReserveInput(
            cluster=wf.start.key.cluster, policy=wf.start.policy.breaker,
            request=DrainRequest(incident_id=wf.id, nodes=nodes, approved_past_groups=True)), DrainVerdict)
    if not verdict.allowed:
        raise Refused(verdict.reason)
    wf.move(S.ISOLATING, f"draining {', '.join(nodes)} ({verdict.reason})")
    isolated = await wf.audited(AuditAction.DRAIN, nodes, reason, wf.step(
        "isolate", IsolateInput(incident_id=wf.id, nodes=nodes, summary=reason,
                                observed_at=observed_at(wf.incident.anomalies)),
        IsolateResult), drained_note)
    wf.done(drained_note(isolated))
    await return_to_service(wf, isolated.drained, isolated.faults)
    return isolated


async def return_to_service(wf: Incident, nodes: tuple[str, ...], faults: tuple[str, ...]) -> None:
    """Hands the nodes this incident drained to their return-to-service workflows, with the
    faults whose shared reason the drains carried (no patch: a field with a default, as `rule`)."""
    policy = wf.start.policy.return_to_service
    if not nodes or not policy.enabled or not (wf.straight or workflow.patched("return-to-service")):
        return
    try:
        spares = wf.start.policy.spares
        await wf.step("start_node_health", NodeHealthRequest(
            cluster=wf.start.key.cluster, nodes=nodes, incident_id=wf.id, policy=policy,
            spares=spares if spares.enabled and spares.target_size else None,
            rule=wf.incident.trust_rule, faults=faults), type(None))
    except Escalation as why:  # the drain stands; only its automatic return is missing
        wf.record(wf.incident.state, f"return to service not started: {why}")
        return
    wf.done(f"{', '.join(nodes)}: back in service after {policy.quarantine_s:.0f} s and a passed "
            "health check, if the drain is still goodput's")
