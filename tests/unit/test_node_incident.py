"""One fault, many jobs: the node incident's rules (goodput.recover.node_incident), as tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from goodput.models import Mode
from goodput.recover.node_incident import (
    MAX_EVIDENCE,
    Delivery,
    Isolation,
    IsolationDecision,
    IsolationReport,
    LinkAnswer,
    LinkRequest,
    NodeIncidentPolicy,
    NodeIncidentState,
    Role,
    ended,
    isolation_of,
    lapse,
    link,
    next_wake,
    node_incident_id,
    refusal,
    settle,
    shared_note,
)

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
POLICY = NodeIncidentPolicy(window_s=600, lead_timeout_s=900)
NID = "node-incident/lab/node3"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ask(incident: str, *, acts: bool = True, mode: Mode = Mode.AUTONOMOUS,
        evidence: tuple[str, ...] = ()) -> LinkRequest:
    return LinkRequest(cluster="lab", node="node3", incident_id=incident, job_id=incident.removeprefix("inc-"),
                       acts=acts, mode=mode, evidence=evidence)


def linked(*requests: LinkRequest, policy: NodeIncidentPolicy = POLICY) -> tuple[NodeIncidentState, LinkAnswer]:
    state = NodeIncidentState(cluster="lab", node="node3")
    answer: LinkAnswer | None = None
    for i, request in enumerate(requests):
        state, answer = link(state, request, at(i), policy)
    assert answer is not None
    return state, answer


def decided(outcome: Isolation, by: str = "inc-1") -> NodeIncidentState:
    if outcome is Isolation.RECOMMENDED:
        return linked(ask(by, acts=False, mode=Mode.MONITOR))[0]
    state, _ = linked(ask(by))
    state, _ = settle(state, IsolationReport(node="node3", incident_id=by, outcome=outcome, detail="why"), at(5))
    return state


@pytest.mark.parametrize(("before", "request_", "role", "leader", "waiting"), [
    # the first incident that acts takes the decision
    ((), ask("inc-1"), Role.LEAD, "inc-1", ()),
    # a second one, while the first decides, waits for it
    ((ask("inc-1"),), ask("inc-2"), Role.WAIT, "inc-1", ("inc-2",)),
    # asking again (a retried activity) gets the same part, no second wait
    ((ask("inc-1"),), ask("inc-1"), Role.LEAD, "inc-1", ()),
    ((ask("inc-1"), ask("inc-2")), ask("inc-2"), Role.WAIT, "inc-1", ("inc-2",)),
    # monitor mode links without taking the lead, and records its recommendation
    ((), ask("inc-1", acts=False, mode=Mode.MONITOR), Role.RECORD, None, ()),
    ((ask("inc-1"),), ask("inc-2", acts=False, mode=Mode.MONITOR), Role.RECORD, "inc-1", ()),
    # a recommendation binds nobody who may act: the acting incident decides
    ((ask("inc-1", acts=False, mode=Mode.MONITOR),), ask("inc-2"), Role.LEAD, "inc-2", ()),
])
def test_link_gives_each_incident_its_part(before: tuple[LinkRequest, ...], request_: LinkRequest, role: Role,
                                           leader: str | None, waiting: tuple[str, ...]) -> None:
    state, answer = linked(*before, request_)
    assert (answer.role, state.leader, state.waiting) == (role, leader, waiting)
    assert answer.node_incident_id == NID == node_incident_id("lab", "node3")
    assert state.linked == len({r.incident_id for r in (*before, request_)}) == answer.jobs


@pytest.mark.parametrize("outcome", list(Isolation))
def test_a_decision_made_is_joined_by_every_later_acting_incident(outcome: Isolation) -> None:
    state = decided(outcome)
    state, answer = link(state, ask("inc-2"), at(10), POLICY)
    if outcome is Isolation.RECOMMENDED:  # not a decision anyone who acts is bound by
        assert answer.role is Role.LEAD
        return
    assert answer.role is Role.JOIN and answer.decision is not None
    assert (answer.decision.outcome, answer.decision.by, answer.jobs) == (outcome, "inc-1", 2)
    assert (refusal("node3", answer) is not None) == (outcome in (Isolation.REFUSED, Isolation.FAILED))


@pytest.mark.parametrize(("outcome", "node_out", "role"), [
    # drained (or Slurm's DOWN) and still out: the same fault, joined
    (Isolation.DRAINED, True, Role.JOIN), (Isolation.ALREADY, True, Role.JOIN),
    # the scheduler could not say: trust the decision, as before the question was asked
    (Isolation.DRAINED, None, Role.JOIN),
    # put back into service since (an operator's resume, slurmd registered again): a new fault
    (Isolation.DRAINED, False, Role.LEAD), (Isolation.ALREADY, False, Role.LEAD),
    # a refused or failed drain never took the node out: in service is what the decision left
    (Isolation.REFUSED, False, Role.JOIN), (Isolation.FAILED, False, Role.JOIN),
])
def test_a_node_back_in_service_that_fails_again_is_a_new_fault(outcome: Isolation, node_out: bool | None,
                                                                role: Role) -> None:
    state = decided(outcome)
    again = ask("inc-2").model_copy(update={"node_out": node_out})
    state, answer = link(state, again, at(60), POLICY)
    assert answer.role is role
    if role is Role.LEAD:  # a fresh fault: this incident decides, the old decision is history
        assert (state.leader, state.decision, state.linked, state.first_at) == ("inc-2", None, 1, at(60))
        assert [d.by for d in state.earlier] == ["inc-1"]
        assert [link.incident_id for link in state.links] == ["inc-2"]
    else:
        assert state.earlier == () and state.linked == 2


def test_an_incident_of_the_old_fault_asking_again_keeps_its_part() -> None:
    state = decided(Isolation.DRAINED)
    retried = ask("inc-1").model_copy(update={"node_out": False})  # its own retried link, after a resume
    state, answer = link(state, retried, at(60), POLICY)
    assert answer.role is Role.JOIN and answer.decision is not None and answer.decision.by == "inc-1"
    assert state.earlier == () and state.linked == 1


def test_monitor_mode_records_one_recommendation_for_the_fault() -> None:
    state, first = linked(ask("inc-1", acts=False, mode=Mode.MONITOR), ask("inc-2", acts=False, mode=Mode.MONITOR))
    assert state.decision is not None and state.decision.outcome is Isolation.RECOMMENDED
    assert state.decision.by == "inc-1" and [link.role for link in state.links] == [Role.RECORD, Role.RECORD]
    assert shared_note("node3", first) == (f"node node3: fault shared with 1 other job ({NID}); drain recommended "
                                           "by incident inc-1: drain of node3 recommended (monitor mode); nothing done")


def test_the_leaders_report_is_handed_to_every_incident_waiting() -> None:
    state, _ = linked(ask("inc-1"), ask("inc-2"), ask("inc-3"))
    state, owed = settle(state, IsolationReport(node="node3", incident_id="inc-1", outcome=Isolation.DRAINED,
                                                detail="node3 drained"), at(9))
    assert [(d.incident_id, d.answer.role) for d in owed] == [("inc-2", Role.JOIN), ("inc-3", Role.JOIN)]
    assert state.decision == IsolationDecision(outcome=Isolation.DRAINED, by="inc-1", detail="node3 drained", at=at(9))
    assert not state.deciding and state.waiting == ()
    # the first decision is the fault's: a late one changes nothing
    again, more = settle(state, IsolationReport(node="node3", incident_id="inc-2", outcome=Isolation.FAILED), at(10))
    assert (again, more) == (state, ())


@pytest.mark.parametrize(("waiters", "heir"), [(("inc-2", "inc-3"), "inc-2"), ((), None)])
def test_a_leader_that_gives_up_hands_the_lead_to_the_longest_waiting(waiters: tuple[str, ...],
                                                                       heir: str | None) -> None:
    state, _ = linked(ask("inc-1"), *(ask(w) for w in waiters))
    state, owed = settle(state, IsolationReport(node="node3", incident_id="inc-1"), at(9))
    assert state.leader == heir and state.decision is None
    assert [(d.incident_id, d.answer.role) for d in owed] == ([(heir, Role.LEAD)] if heir else [])
    if heir:
        assert state.waiting == waiters[1:] and state.lead_since == at(9)
        assert next(link for link in state.links if link.incident_id == heir).role is Role.LEAD
    else:  # the next incident that acts leads
        assert link(state, ask("inc-9"), at(10), POLICY)[1].role is Role.LEAD


def test_a_report_from_an_incident_the_fault_never_linked_is_not_its_decision() -> None:
    state, _ = linked(ask("inc-1"))
    stale = IsolationReport(node="node3", incident_id="inc-of-an-earlier-fault", outcome=Isolation.DRAINED)
    assert settle(state, stale, at(9)) == (state, ())


def test_a_waiter_that_gives_up_stops_waiting() -> None:
    state, _ = linked(ask("inc-1"), ask("inc-2"), ask("inc-3"))
    state, owed = settle(state, IsolationReport(node="node3", incident_id="inc-2"), at(9))
    assert (state.leader, state.waiting, owed) == ("inc-1", ("inc-3",), ())


def test_a_silent_leader_loses_the_lead_after_its_timeout_but_may_still_report_first() -> None:
    state, _ = linked(ask("inc-1"), ask("inc-2"))
    assert lapse(state, at(899), POLICY) == (state, ())
    state, owed = lapse(state, at(900), POLICY)
    assert state.leader == "inc-2" and [d.incident_id for d in owed] == ["inc-2"]
    # the old leader reports before the heir: its decision stands, and the heir is told
    state, owed = settle(state, IsolationReport(node="node3", incident_id="inc-1", outcome=Isolation.DRAINED), at(901))
    assert state.decision is not None and state.decision.by == "inc-1"
    assert owed == (Delivery(incident_id="inc-2", node="node3", answer=owed[0].answer),)
    assert owed[0].answer.role is Role.JOIN


@pytest.mark.parametrize(("state_of", "now", "over"), [
    (lambda: linked(ask("inc-1"))[0], 10_000, False),  # someone decides: never over
    (lambda: decided(Isolation.DRAINED), 599, False),  # linked at 0: window from the last link
    (lambda: decided(Isolation.DRAINED), 600, True),
    (lambda: linked(ask("inc-1", acts=False))[0], 600, True),
])
def test_a_fault_ends_a_window_after_its_last_link(state_of: object, now: float, over: bool) -> None:
    state = state_of()  # type: ignore[operator]
    assert ended(state, at(now), POLICY) is over


def test_the_workflow_wakes_for_the_lead_deadline_while_someone_decides_else_for_the_window() -> None:
    deciding, _ = linked(ask("inc-1"))
    assert next_wake(deciding, POLICY) == at(900)
    assert next_wake(decided(Isolation.DRAINED), POLICY) == at(600)
    assert next_wake(NodeIncidentState(cluster="lab", node="node3"), POLICY) is None


def test_links_and_evidence_are_bounded() -> None:
    policy = NodeIncidentPolicy(max_links=2)
    lines = tuple(f"line {i} " + "x" * 500 for i in range(30))
    state, answer = linked(*(ask(f"inc-{i}", evidence=lines) for i in range(5)), policy=policy)
    assert len(state.links) == 2 and state.linked == 5 == answer.jobs
    assert len(state.evidence) == MAX_EVIDENCE and all(len(line) == 300 for line in state.evidence)
    assert state.jobs == ("0", "1")


@pytest.mark.parametrize(("role", "decision", "note"), [
    (Role.JOIN, IsolationDecision(outcome=Isolation.DRAINED, by="X", at=T0),
     f"node node3: fault shared with 2 other jobs ({NID}); drained once by incident X"),
    (Role.JOIN, IsolationDecision(outcome=Isolation.ALREADY, by="X", detail="node3 already down by someone else",
                                  at=T0),
     f"node node3: fault shared with 2 other jobs ({NID}); already out of service, acknowledged once by incident X: "
     "node3 already down by someone else"),
    (Role.WAIT, None, f"node node3: fault shared with 2 other jobs ({NID}); incident X is deciding, waiting for its "
                      "decision"),
    (Role.LEAD, None,
     f"node node3: fault shared with 2 other jobs ({NID}); this incident makes the isolation decision"),
])
def test_what_the_job_incident_says_about_its_fault(role: Role, decision: IsolationDecision | None, note: str) -> None:
    answer = LinkAnswer(node_incident_id=NID, role=role, decision=decision, leader="X", jobs=3)
    assert shared_note("node3", answer) == note


def test_the_faults_isolation_in_one_line() -> None:
    deciding, _ = linked(ask("inc-1"), ask("inc-2"))
    assert isolation_of(deciding) == "incident inc-1 deciding; 1 waiting"
    assert isolation_of(decided(Isolation.REFUSED)) == "refused by incident inc-1: why"
    assert isolation_of(NodeIncidentState(cluster="lab", node="node3")) == "no decision"
