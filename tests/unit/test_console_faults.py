"""A storm of incidents that blame one node, close together, is one fault with many jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.cli.service import IncidentSummary
from goodput.console.faults import node_faults

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def incident(name: str, job: str, minute: float, *nodes: str, state: str = "recovered") -> IncidentSummary:
    return IncidentSummary(incident_id=name, job_id=job, cluster="c1", state=state, category="node-failure",
                           culprit_nodes=nodes, started_at=T0 + timedelta(minutes=minute))


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
