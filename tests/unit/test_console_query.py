"""The incident list's filters become a visibility query over goodput's search attributes: the
console lists and counts without reading a single history."""

from __future__ import annotations

from datetime import UTC, datetime

from goodput.console.filters import IncidentFilter
from workers.console.backend import visibility_query

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_every_filter_is_a_clause_on_its_search_attribute() -> None:
    flt = IncidentFilter.from_params({"state": "escalated", "mode": "approve", "category": "nccl-timeout",
                                      "cluster": "eos", "partition": "gpu", "job": "77", "node": "n3",
                                      "since": "2h", "open": "1"})
    assert visibility_query(flt, NOW) == (
        "WorkflowType = 'RecoveryWorkflow' AND GoodputState = 'escalated' AND GoodputMode = 'approve' AND "
        "GoodputCategory = 'nccl-timeout' AND GoodputCluster = 'eos' AND GoodputPartition = 'gpu' AND "
        "GoodputJobId = '77' AND "
        "GoodputCulpritNodes = 'n3' AND StartTime >= '2026-12-01T10:00:00Z' AND ExecutionStatus = 'Running'")
    assert visibility_query(IncidentFilter(), NOW) == "WorkflowType = 'RecoveryWorkflow'"
