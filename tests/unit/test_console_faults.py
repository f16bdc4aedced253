"""A storm of incidents that blame one node, close together, is one fault with many jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.models import Mode
from goodput.recover.node_incident import (
    Isolation,
    IsolationDecision,
    JobLink,
    NodeIncidentState,
    Role,
    node_incident_id,
)
from goodput.service.faults import all_faults, node_faults
from goodput.service.incidents import IncidentSummary

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def incident(name: str, job: str, minute: float, *nodes: str, state: str = "recovered",
             linked: tuple[str, ...] = ()) -> IncidentSummary:
    return IncidentSummary(incident_id=name, job_id=job, cluster="c1", state=state, category="node-failure",
                           culprit_nodes=nodes, started_at=T0 + timedelta(minutes=minute), node_incidents=linked)


def test_incidents_blaming_one_node_close_together_are_one_fault() -> None:
    rows = [incident("a", "1", 0, "node3"), incident("b", "2", 0.5, "node3"), incident("c", "3", 4, "node3"),
            incident("d", "4", 1, "node5"), incident("late", "5", 60, "node3", state="escalated"),
            incident("app", "6", 0)]
    faults = node_faults(rows, window=timedelta(minutes=10))
    assert [(f.node, [s.incident_id for s in f.incidents]) for f in faults] == [
        ("node3", ["a", "b", "c"]), ("node3", ["late"]), ("node5", ["d"])]
    storm = faults[0]
    assert storm.jobs == ("c1/1", "c1/2", "c1/3") and storm.categories == ("node-failure",)
    assert storm.first_at == T0 and storm.last_at == T0 + timedelta(minutes=4)
    assert node_faults(rows, min_jobs=2) == [storm]


def test_an_incident_blaming_two_nodes_counts_for_both() -> None:
    faults = node_faults([incident("a", "1", 0, "node1", "node2"), incident("b", "2", 1, "node2")])
    assert {(f.node, len(f.jobs)) for f in faults} == {("node2", 2), ("node1", 1)}


def test_a_node_incident_is_one_fault_and_unlinked_incidents_are_still_grouped() -> None:
    nid = node_incident_id("c1", "node3")
    links = tuple(JobLink(incident_id=i, job_id=j, at=T0 + timedelta(minutes=m), role=r, mode=Mode.AUTONOMOUS)
                  for i, j, m, r in (("a", "1", 0, Role.LEAD), ("b", "2", 0.5, Role.JOIN), ("old", "7", 1, Role.JOIN)))
    fault = NodeIncidentState(cluster="c1", node="node3", first_at=T0, last_at=T0 + timedelta(minutes=1), links=links,
                              linked=4, decision=IsolationDecision(outcome=Isolation.DRAINED, by="a", at=T0))
    rows = [incident("a", "1", 0, "node3", linked=(nid,)), incident("b", "2", 0.5, "node3", linked=(nid,)),
            # historical incidents, never linked: grouped by time as before
            incident("h1", "3", 30, "node5"), incident("h2", "4", 31, "node5")]
    shown = all_faults([fault], rows, window=timedelta(minutes=10))
    assert [(f.node, f.node_incident, f.hit, [s.incident_id for s in f.incidents]) for f in shown] == [
        ("node3", nid, 4, ["a", "b", "old"]), ("node5", "", 2, ["h1", "h2"])]
    assert shown[0].isolation == "drained by incident a" and shown[0].jobs == ("c1/1", "c1/2", "c1/7")
    # one older than the incident listing is shown as the node incident recorded it
    assert shown[0].incidents[2].state == "" and shown[0].incidents[2].job_id == "7"
    assert all_faults([fault], rows, min_jobs=3) == shown[:1]
