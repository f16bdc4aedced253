"""storm-lab's cost of a round: Temporal's persistence requests per incident, split by operation.

The embedded dev server keeps its state in SQLite through one connection, so every persistence
request waits for the one before it: which requests an incident costs (and how long the store was
busy) is what a storm's latency follows (#29, docs/scaling.md)."""

from __future__ import annotations

from typing import Any

from benchmarks import _storm_lab_rig as rig


def _snapshot(at: float, metrics: dict[tuple[str, str, str], float]) -> dict[str, Any]:
    return {"metrics": metrics, "workers": [(1.0, 0.5)], "server": 2.0, "slurmctld": 0.0, "injector": 0.0,
            "machine": (10.0, 20.0), "at": at}


def test_persistence_requests_are_split_by_operation_per_incident() -> None:
    before = _snapshot(100.0, {("persistence_requests", "history", "UpdateWorkflowExecution"): 50.0,
                               ("persistence_requests", "matching", "CreateTasks"): 5.0,
                               ("persistence_latency_sum", "history", "UpdateWorkflowExecution"): 1.0,
                               ("persistence_latency_count", "history", "UpdateWorkflowExecution"): 50.0})
    after = _snapshot(110.0, {("persistence_requests", "history", "UpdateWorkflowExecution"): 350.0,
                              ("persistence_requests", "matching", "CreateTasks"): 25.0,
                              ("persistence_requests", "frontend", "GetNamespace"): 0.0,
                              # the same operation asked by two services is one operation's count
                              ("persistence_requests", "frontend", "GetCurrentClusterMetadata"): 40.0,
                              ("persistence_requests", "history", "GetCurrentClusterMetadata"): 30.0,
                              ("persistence_latency_sum", "history", "UpdateWorkflowExecution"): 9.0,
                              ("persistence_latency_count", "history", "UpdateWorkflowExecution"): 350.0})
    spent = rig.cost(before, after, incidents=10)
    assert spent["persistence_requests_per_incident"] == 39.0
    # most requested first; an operation with no requests in the round is left out
    assert list(spent["persistence_requests_per_incident_by_operation"].items()) == [
        ("UpdateWorkflowExecution", 30.0), ("GetCurrentClusterMetadata", 7.0), ("CreateTasks", 2.0)]
    # 8 s inside persistence calls over a 10 s window
    assert spent["persistence_seconds_per_second"] == 0.8
    assert spent["persistence_latency_ms_mean"] == round(1000 * 8.0 / 300.0, 2)
