"""Shared drains: node incidents under one switch (else rack) within one window of the first drain
with one reason that names the fault, the first keeps its own, and the reason still proves
goodput's ownership of each node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.ownership import drain_reason, is_goodput_reason, owning_incident
from goodput.recover.shared_fault import OpenFault, SharedDrain, join_fault, owning_fault, topology_groups

GROUPS = topology_groups((("leaf1", "node[1-20]"), ("leaf2", "node[21-40]")), (("rack-a", "node[1-50]"),))
AT = datetime(2026, 12, 4, 1, 0, 10, tzinfo=UTC)


class Worker:
    """One worker's open faults, remembered as the isolate activity remembers them."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.faults: dict[str, OpenFault] = {}
        self.window_s = window_s

    def drain(self, node: str, at: datetime | None, incident: str = "") -> SharedDrain | None:
        drain, fault = join_fault(self.faults, GROUPS, node, incident or f"inc-{node}", at, self.window_s)
        if fault is not None:
            self.faults[fault.group] = fault
        return drain


def test_a_switchs_first_node_incident_keeps_its_reason_and_the_rest_share_one() -> None:
    worker = Worker()
    drains = [worker.drain(f"node{i}", AT + timedelta(seconds=i)) for i in range(1, 21)]
    assert drains[0] is None  # a lone fault's drain still names its incident and its cause
    assert {d.fault_id for d in drains[1:] if d} == {f"fault-switch-leaf1-{int(AT.timestamp()) + 1}"}
    assert all(drains[1:])
    reasons = {drain_reason(d.fault_id, d.reason_summary) for d in drains if d}
    assert len(reasons) == 1  # what lets the coalescer join them into one scontrol update


def test_a_fault_straddling_a_grid_line_is_still_one_fault() -> None:
    """The fixed grid (observed time rounded down to the window) split this into two reasons."""
    worker, line = Worker(), datetime(2026, 12, 4, 1, 1, 0, tzinfo=UTC)
    worker.drain("node1", line - timedelta(seconds=3))
    drains = [worker.drain("node2", line - timedelta(seconds=0.5)),
              worker.drain("node3", line + timedelta(seconds=0.5)),
              worker.drain("node4", line - timedelta(seconds=5))]  # isolated later, observed earlier
    assert len({d.fault_id for d in drains if d}) == 1 and all(drains), drains


def test_a_retry_gets_the_same_answer_and_a_node_failing_again_is_its_own_failure() -> None:
    worker = Worker()
    assert worker.drain("node1", AT, "inc-a") is None
    shared = worker.drain("node2", AT, "inc-b")
    assert shared is not None
    assert worker.drain("node1", AT, "inc-a") is None and worker.drain("node2", AT, "inc-b") == shared  # retries
    assert worker.drain("node2", AT + timedelta(seconds=20), "inc-c") is None  # put back, failed again
    assert worker.drain("node1", AT + timedelta(seconds=20), "inc-d") is None


def test_another_switch_another_window_or_no_switch_is_another_fault() -> None:
    worker = Worker()
    for node in ("node1", "node21", "node45"):  # each group's opener
        assert worker.drain(node, AT) is None
    first, other_switch, rack = (worker.drain(n, AT) for n in ("node2", "node22", "node46"))
    assert worker.drain("node3", AT + timedelta(seconds=60)) is None  # a later fault's opener
    later = worker.drain("node4", AT + timedelta(seconds=61))
    assert first and other_switch and rack and later
    assert len({first.fault_id, other_switch.fault_id, later.fault_id}) == 3
    assert rack.fault_id.startswith("fault-rack-rack-a-")
    assert worker.drain("node99", AT) is None and "node99" not in str(worker.faults)  # under no group


def test_sharing_off_or_an_incident_without_an_observed_time_keeps_its_own_reason() -> None:
    for worker, at in ((Worker(0.0), AT), (Worker(), None)):
        assert worker.drain("node1", at) is None and worker.drain("node2", at) is None
        assert worker.faults == {}


def test_a_shared_reason_is_goodputs_and_names_the_fault_not_an_incident() -> None:
    worker = Worker()
    worker.drain("node1", AT)
    drain = worker.drain("node2", AT)
    assert drain is not None
    reason = drain_reason(drain.fault_id, drain.reason_summary)
    assert is_goodput_reason(reason) and owning_incident(reason) == drain.fault_id
    assert owning_fault(reason) == drain.fault_id
    assert owning_fault(drain_reason("incident-c-1-0-abcd1234", "x")) is None  # one incident's drain
    assert owning_fault("goodput-lookalike: fault-switch-leaf1-1") is None
    assert owning_fault("admin: fault-switch-leaf1-1") is None


def test_an_unsafe_switch_name_still_makes_a_valid_distinct_reason() -> None:
    groups = topology_groups((("leaf 1", "a[1-2]"), ("leaf:1", "b[1-2]")), ())
    faults: dict[str, OpenFault] = {}
    drains = []
    for node in ("a1", "b1", "a2", "b2"):
        drain, fault = join_fault(faults, groups, node, f"inc-{node}", AT, 60.0)
        if fault is not None:
            faults[fault.group] = fault
        drains.append(drain)
    a, b = drains[2], drains[3]
    assert a is not None and b is not None and a.fault_id != b.fault_id
    for d in (a, b):
        assert owning_fault(drain_reason(d.fault_id, d.reason_summary)) == d.fault_id
