"""One fault, many jobs: the node incident that links every job incident one node's fault hit.

A node (or the switch above it) that fails takes every job on it down, and each job's attempt is
its own incident that recovers on its own schedule. Weighed alone, each would reserve a drain
through the breaker and drain the node itself: one fault, N decisions, N audit records, and a
storm that reads as N problems. The node incident (workflows.node_incident, one per cluster and
node while the fault lasts) holds the one isolation decision instead: the first incident that
acts leads (reserves, drains, reports back), the others join that decision, and every one of
them gets the same outcome and the node incident's id. A leader that never reports (cancelled,
its workflow terminated) hands the decision to the next incident waiting for it.

Pure: the workflow holds the state and calls `link`, `settle` and `lapse` with `workflow.now()`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from pydantic import Field

from goodput.models import Frozen, Mode

MAX_EVIDENCE = 20
MAX_EARLIER = 10
MAX_EVIDENCE_LINE = 300


class NodeIncidentPolicy(Frozen):
    """`[policy.node_incident]`."""

    enabled: bool = True
    # A fault lasts while job incidents keep linking to it within this of each other (the
    # console's grouping window too); after that quiet time the node incident ends.
    window_s: float = Field(default=600.0, gt=0.0, le=7 * 86400.0)
    # A leader that has not reported its decision within this hands it to the next incident
    # waiting (the drain step itself retries for minutes before it gives up).
    lead_timeout_s: float = Field(default=900.0, gt=0.0, le=86400.0)
    # The job incidents listed per node incident; more are counted, not listed.
    max_links: int = Field(default=200, ge=1, le=10_000)
    # Nodes under one switch (else rack) whose incidents were first observed within this of the
    # group's first drain with one reason naming their fault, one command; the first keeps its own
    # (goodput.recover.shared_fault). 0: every drain names its own incident. Read by the worker's
    # isolate activity.
    shared_drain_window_s: float = Field(default=60.0, ge=0.0, le=86400.0)


class Isolation(StrEnum):
    """How a node incident's isolation decision came out."""

    DRAINED = "drained"
    ALREADY = "already-out"  # drained or down before goodput asked (Slurm's DOWN, an admin's drain)
    REFUSED = "refused"  # the cluster's drain breaker said no
    FAILED = "failed"  # the drain step failed for good
    RECOMMENDED = "recommended"  # monitor mode: recommended, nothing done


class Role(StrEnum):
    """What a job incident is told to do about its node when it links."""

    LEAD = "lead"  # take the isolation decision: reserve, drain, report it
    JOIN = "join"  # the decision is made: act on it, drain nothing
    WAIT = "wait"  # another incident is deciding: its decision arrives as a signal
    RECORD = "record"  # not acting (monitor mode): linked so the fault shows every job


class IsolationDecision(Frozen):
    """The one isolation decision of a node incident: its outcome and the job incident that took it."""

    outcome: Isolation
    by: str  # the job incident that decided
    detail: str = ""
    at: datetime


class JobLink(Frozen):
    """One job incident linked to the node incident, with the role it was given."""

    incident_id: str
    job_id: str
    at: datetime
    role: Role
    mode: Mode


class LinkRequest(Frozen):
    """One job incident's plan drains `node`; `acts` is False when it only recommends."""

    cluster: str
    node: str
    incident_id: str
    job_id: str
    acts: bool
    mode: Mode
    evidence: tuple[str, ...] = ()
    policy: NodeIncidentPolicy = Field(default_factory=NodeIncidentPolicy)
    # Whether the scheduler has the node out of service (drained, down, not responding) as the
    # link is asked for; None when unknown. Filled in by the link activity, never by the workflow.
    node_out: bool | None = None


class LinkAnswer(Frozen):
    """What a linking job incident is told: its role, and the decision when there is one."""

    node_incident_id: str
    role: Role
    decision: IsolationDecision | None = None
    leader: str | None = None  # the incident deciding, or that decided
    jobs: int = 1  # job incidents linked so far, this one included


class IsolationReport(Frozen):
    """A job incident's report on `node`: its decision, or None when it gives up deciding
    (cancelled) or waiting."""

    node: str
    incident_id: str
    outcome: Isolation | None = None
    detail: str = ""


class Delivery(Frozen):
    """A decision (or the lead) the node incident owes a job incident, sent as a signal."""

    incident_id: str
    node: str
    answer: LinkAnswer


class NodeIncidentState(Frozen):
    """One node's fault: the job incidents it took down, the lead, and the isolation decision."""

    cluster: str
    node: str
    first_at: datetime | None = None
    last_at: datetime | None = None
    links: tuple[JobLink, ...] = ()
    linked: int = 0  # every job incident linked, also those past `max_links`
    evidence: tuple[str, ...] = ()
    leader: str | None = None
    lead_since: datetime | None = None
    waiting: tuple[str, ...] = ()
    decision: IsolationDecision | None = None
    # Decisions of earlier faults on the node within this node incident's life: the node was put
    # back into service and failed again (newest last, bounded).
    earlier: tuple[IsolationDecision, ...] = ()

    @property
    def incident_id(self) -> str:
        """The node incident's workflow id."""
        return node_incident_id(self.cluster, self.node)

    @property
    def jobs(self) -> tuple[str, ...]:
        """The jobs linked, once each, in link order."""
        return tuple(dict.fromkeys(link.job_id for link in self.links))

    @property
    def deciding(self) -> bool:
        """An incident holds the lead and has not reported yet."""
        return self.leader is not None and not _decided(self.decision)


def node_incident_id(cluster: str, node: str) -> str:
    """The workflow id of `node`'s node incident on `cluster`."""
    return f"node-incident/{cluster}/{node}"


def _decided(decision: IsolationDecision | None) -> bool:
    """A recommendation binds nobody who may act: only an acting incident's decision is shared."""
    return decision is not None and decision.outcome is not Isolation.RECOMMENDED


def _answer(state: NodeIncidentState, role: Role) -> LinkAnswer:
    return LinkAnswer(node_incident_id=state.incident_id, role=role, decision=state.decision, leader=state.leader,
                      jobs=state.linked)


def _with_link(state: NodeIncidentState, request: LinkRequest, role: Role, now: datetime,
               policy: NodeIncidentPolicy) -> NodeIncidentState:
    known = next((i for i, link in enumerate(state.links) if link.incident_id == request.incident_id), None)
    link = JobLink(incident_id=request.incident_id, job_id=request.job_id, at=now, role=role, mode=request.mode)
    if known is not None:
        links = (*state.links[:known], link.model_copy(update={"at": state.links[known].at}),
                 *state.links[known + 1:])
        linked = state.linked
    else:
        links = (*state.links, link) if len(state.links) < policy.max_links else state.links
        linked = state.linked + 1
    seen = set(state.evidence)
    fresh = [line[:MAX_EVIDENCE_LINE] for line in request.evidence if line and line[:MAX_EVIDENCE_LINE] not in seen]
    evidence = (*state.evidence, *dict.fromkeys(fresh))[:MAX_EVIDENCE]
    return state.model_copy(update={"links": links, "linked": linked, "evidence": evidence,
                                    "first_at": state.first_at or now, "last_at": now})


def _back_in_service(state: NodeIncidentState, request: LinkRequest) -> bool:
    """The node was isolated by this fault's decision and is in service again (an operator resumed
    it, or its slurmd registered after Slurm's DOWN): a job hit there now is a new fault, which
    needs its own decision; joining the old one would leave the failing node in service."""
    decision = state.decision
    return (request.node_out is False and decision is not None
            and decision.outcome in (Isolation.DRAINED, Isolation.ALREADY)
            and all(link.incident_id != request.incident_id for link in state.links))


def _new_fault(state: NodeIncidentState) -> NodeIncidentState:
    earlier = (*state.earlier, state.decision)[-MAX_EARLIER:] if state.decision else state.earlier
    return NodeIncidentState(cluster=state.cluster, node=state.node, earlier=earlier)


def link(state: NodeIncidentState, request: LinkRequest, now: datetime,
         policy: NodeIncidentPolicy) -> tuple[NodeIncidentState, LinkAnswer]:
    """Link a job incident to the fault and tell it its part. Asking again (a retried activity)
    gets the same part back."""
    if not request.acts:
        state = _with_link(state, request, Role.RECORD, now, policy)
        if state.decision is None and state.leader is None:
            state = state.model_copy(update={"decision": IsolationDecision(
                outcome=Isolation.RECOMMENDED, by=request.incident_id, at=now,
                detail=f"drain of {request.node} recommended ({request.mode} mode); nothing done")})
        return state, _answer(state, Role.RECORD)
    if _back_in_service(state, request):
        state = _new_fault(state)
    if _decided(state.decision):
        state = _with_link(state, request, Role.JOIN, now, policy)
        return state, _answer(state, Role.JOIN)
    if state.leader == request.incident_id or state.leader is None:
        state = _with_link(state, request, Role.LEAD, now, policy)
        if state.leader is None:
            state = state.model_copy(update={"leader": request.incident_id, "lead_since": now})
        return state, _answer(state, Role.LEAD)
    state = _with_link(state, request, Role.WAIT, now, policy)
    if request.incident_id not in state.waiting:
        state = state.model_copy(update={"waiting": (*state.waiting, request.incident_id)})
    return state, _answer(state, Role.WAIT)


def _role(state: NodeIncidentState, incident_id: str, role: Role) -> tuple[JobLink, ...]:
    return tuple(link.model_copy(update={"role": role}) if link.incident_id == incident_id else link
                 for link in state.links)


def _hand_over(state: NodeIncidentState, now: datetime) -> tuple[NodeIncidentState, tuple[Delivery, ...]]:
    """The lead passes to the incident that has waited longest, or lies open for the next."""
    if not state.waiting:
        return state.model_copy(update={"leader": None, "lead_since": None}), ()
    heir, rest = state.waiting[0], state.waiting[1:]
    state = state.model_copy(update={"leader": heir, "lead_since": now, "waiting": rest,
                                     "links": _role(state, heir, Role.LEAD)})
    return state, (Delivery(incident_id=heir, node=state.node, answer=_answer(state, Role.LEAD)),)


def settle(state: NodeIncidentState, report: IsolationReport,
           now: datetime) -> tuple[NodeIncidentState, tuple[Delivery, ...]]:
    """A job incident's report: the first decision made is the fault's, and every incident
    waiting for it gets it; a leader that gives up hands the lead on; a waiter that gives up
    stops waiting. A report from an incident this fault never linked (a leader of an earlier
    fault on the node, very late) is not this fault's."""
    if report.incident_id != state.leader and report.incident_id not in state.waiting \
            and all(link.incident_id != report.incident_id for link in state.links):
        return state, ()
    if report.outcome in (None, Isolation.RECOMMENDED):  # no decision: only an acting incident makes one
        if report.incident_id == state.leader and not _decided(state.decision):
            return _hand_over(state, now)
        return state.model_copy(update={"waiting": tuple(i for i in state.waiting if i != report.incident_id)}), ()
    if _decided(state.decision):
        return state, ()  # a superseded leader, late: the fault already has its decision
    # Also an heir the lead passed to while this (slow) leader was still at work: it learns
    # the decision and its own drain finds the node already drained.
    told = [*state.waiting, *([state.leader] if state.leader not in (None, report.incident_id) else [])]
    decision = IsolationDecision(outcome=report.outcome, by=report.incident_id, detail=report.detail[:2000], at=now)
    state = state.model_copy(update={"decision": decision, "leader": report.incident_id, "waiting": (),
                                     "links": _role(state, report.incident_id, Role.LEAD)})
    joined = _answer(state, Role.JOIN)
    return state, tuple(Delivery(incident_id=i, node=state.node, answer=joined) for i in dict.fromkeys(told) if i)


def lapse(state: NodeIncidentState, now: datetime,
          policy: NodeIncidentPolicy) -> tuple[NodeIncidentState, tuple[Delivery, ...]]:
    """A leader silent past `lead_timeout_s` loses the lead (it may still report first)."""
    if not state.deciding or state.lead_since is None:
        return state, ()
    if now - state.lead_since < timedelta(seconds=policy.lead_timeout_s):
        return state, ()
    return _hand_over(state, now)


def ended(state: NodeIncidentState, now: datetime, policy: NodeIncidentPolicy) -> bool:
    """Over: nobody is deciding or waiting, and no job incident linked for a whole window."""
    if state.deciding or state.waiting or state.last_at is None:
        return False
    return now - state.last_at >= timedelta(seconds=policy.window_s)


def next_wake(state: NodeIncidentState, policy: NodeIncidentPolicy) -> datetime | None:
    """When `lapse` or `ended` can next change their answer (while someone decides, the
    window cannot end the fault: only the lead's deadline matters)."""
    if state.deciding and state.lead_since is not None:
        return state.lead_since + timedelta(seconds=policy.lead_timeout_s)
    if state.last_at is not None:
        return state.last_at + timedelta(seconds=policy.window_s)
    return None


# -- what a job incident says about its node incident ---------------------------------------


def _others(answer: LinkAnswer) -> str:
    others = answer.jobs - 1
    return f"shared with {others} other job{'s' if others != 1 else ''}" if others else "seen by this job only so far"


def shared_note(node: str, answer: LinkAnswer) -> str:
    """The job incident's timeline line for its part in the fault."""
    head = f"node {node}: fault {_others(answer)} ({answer.node_incident_id})"
    decision = answer.decision
    if answer.role is Role.LEAD:
        return f"{head}; this incident makes the isolation decision"
    if answer.role is Role.WAIT or decision is None:
        waiting = ", waiting for its decision" if answer.role is Role.WAIT else ""
        return f"{head}; incident {answer.leader or '?'} is deciding{waiting}"
    verb = {Isolation.DRAINED: "drained once by incident", Isolation.ALREADY: "already out of service, "
            "acknowledged once by incident", Isolation.REFUSED: "drain refused once, for incident",
            Isolation.FAILED: "drain failed once, for incident",
            Isolation.RECOMMENDED: "drain recommended by incident"}[decision.outcome]
    return f"{head}; {verb} {decision.by}" + (f": {decision.detail}" if decision.detail else "")


def refusal(node: str, answer: LinkAnswer) -> str | None:
    """Why a joining incident must escalate (the shared decision was no drain), else None."""
    decision = answer.decision
    if decision is None or decision.outcome not in (Isolation.REFUSED, Isolation.FAILED):
        return None
    return (f"node {node}: the fault's isolation decision ({answer.node_incident_id}, by incident "
            f"{decision.by}) was no drain: {decision.detail}")


def isolation_of(state: NodeIncidentState) -> str:
    """The fault's isolation as one line, for the console and `goodput faults`."""
    decision = state.decision
    if state.deciding:
        return f"incident {state.leader} deciding" + (f"; {len(state.waiting)} waiting" if state.waiting else "")
    if decision is None:
        return "no decision"
    return f"{decision.outcome} by incident {decision.by}" + (f": {decision.detail}" if decision.detail else "")


class NodeIncidents(Protocol):
    """Where a job incident links itself to its node's fault (the node incident workflow)."""

    async def link(self, request: LinkRequest) -> LinkAnswer:
        """Link `request`'s job incident to its node's incident (started when there is none) and get its role."""
        ...
