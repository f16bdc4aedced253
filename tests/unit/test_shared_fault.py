"""Shared drains: node incidents under one switch (else rack) within one window drain with one
reason that names the fault, and the reason still proves goodput's ownership of each node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.ownership import drain_reason, is_goodput_reason, owning_incident
from goodput.recover.shared_fault import SharedDrain, owning_fault, shared_drain, topology_groups

GROUPS = topology_groups((("leaf1", "node[1-20]"), ("leaf2", "node[21-40]")), (("rack-a", "node[1-50]"),))
AT = datetime(2026, 12, 4, 1, 0, 10, tzinfo=UTC)


def in_one_worker(nodes_at: list[tuple[str, datetime]], window_s: float = 60.0) -> list[SharedDrain | None]:
    """Each node's shared drain as one worker decides them in this order, remembering its anchors."""
    anchors: dict[str, int] = {}
    drains = []
    for node, at in nodes_at:
        drain = shared_drain(node, GROUPS, at, window_s, anchors)
        if drain is not None:
            anchors[drain.anchor[0]] = drain.anchor[1]
        drains.append(drain)
    return drains


def test_nodes_of_one_switch_in_one_window_share_one_fault_and_one_reason() -> None:
    drains = in_one_worker([(f"node{i}", AT + timedelta(seconds=i)) for i in range(1, 21)])
    assert all(d is not None for d in drains)
    # anchored on the first incident isolated, not on a grid
    assert {d.fault_id for d in drains if d} == {f"fault-switch-leaf1-{int(AT.timestamp()) + 1}"}
    reasons = {drain_reason(d.fault_id, d.reason_summary) for d in drains if d}
    assert len(reasons) == 1  # what lets the coalescer join them into one scontrol update


def test_a_fault_straddling_a_grid_line_is_still_one_fault() -> None:
    """The fixed grid (observed time rounded down to the window) split this into two reasons."""
    line = datetime(2026, 12, 4, 1, 1, 0, tzinfo=UTC)
    drains = in_one_worker([("node1", line - timedelta(seconds=0.5)), ("node2", line + timedelta(seconds=0.5)),
                            ("node3", line - timedelta(seconds=2))])  # isolated later, observed earlier
    assert len({d.fault_id for d in drains if d}) == 1, drains


def test_another_switch_another_window_or_no_switch_is_another_fault() -> None:
    first, other_switch, later = in_one_worker([("node1", AT), ("node21", AT), ("node2", AT + timedelta(seconds=60))])
    assert first is not None and other_switch is not None and later is not None
    assert len({first.fault_id, other_switch.fault_id, later.fault_id}) == 3
    rack_only = shared_drain("node45", GROUPS, AT, 60.0)
    assert rack_only is not None and rack_only.fault_id.startswith("fault-rack-rack-a-")
    assert shared_drain("node99", GROUPS, AT, 60.0) is None  # under no group: its incident's own reason


def test_sharing_off_or_an_incident_without_an_observed_time_keeps_its_own_reason() -> None:
    assert shared_drain("node1", GROUPS, AT, 0.0) is None
    assert shared_drain("node1", GROUPS, None, 60.0) is None


def test_a_shared_reason_is_goodputs_and_names_the_fault_not_an_incident() -> None:
    drain = shared_drain("node1", GROUPS, AT, 60.0)
    assert drain is not None
    reason = drain_reason(drain.fault_id, drain.reason_summary)
    assert is_goodput_reason(reason) and owning_incident(reason) == drain.fault_id
    assert owning_fault(reason) == drain.fault_id
    assert owning_fault(drain_reason("incident-c-1-0-abcd1234", "x")) is None  # one incident's drain
    assert owning_fault("goodput-lookalike: fault-switch-leaf1-1") is None
    assert owning_fault("admin: fault-switch-leaf1-1") is None


def test_an_unsafe_switch_name_still_makes_a_valid_distinct_reason() -> None:
    groups = topology_groups((("leaf 1", "a1"), ("leaf:1", "b1")), ())
    a, b = shared_drain("a1", groups, AT, 60.0), shared_drain("b1", groups, AT, 60.0)
    assert a is not None and b is not None and a.fault_id != b.fault_id
    for d in (a, b):
        assert owning_fault(drain_reason(d.fault_id, d.reason_summary)) == d.fault_id
