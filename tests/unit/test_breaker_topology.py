"""The breaker's blast radius by topology: drains per switch and per rack, from a configured map."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from goodput.recover.breaker import (
    BreakerPolicy,
    BreakerState,
    DrainRequest,
    DrainVerdict,
    TopologyGroup,
    decide,
    reset,
)

T0 = datetime(2026, 11, 29, 12, tzinfo=UTC)
POLICY = BreakerPolicy(max_drained_nodes=10, window_s=600, cooldown_s=1800, max_drains_per_switch=2,
                       max_drains_per_rack=3,
                       switches=(TopologyGroup(name="s1", nodes="node[1-4]"),
                                 TopologyGroup(name="s2", nodes="node[5-8]")),
                       racks=(TopologyGroup(name="r1", nodes="node[1-2,5-6]"),))


def ask(state: BreakerState, incident: str, *nodes: str,
        at: timedelta = timedelta()) -> tuple[BreakerState, DrainVerdict]:
    return decide(state, DrainRequest(incident_id=incident, nodes=nodes), T0 + at, POLICY)


def test_three_drains_under_one_switch_trip_its_limit_and_name_the_switch() -> None:
    state, first = ask(BreakerState(), "i1", "node1")
    state, second = ask(state, "i2", "node3")
    state, third = ask(state, "i3", "node4")
    assert (first.allowed, second.allowed, third.allowed) == (True, True, False)
    assert third.group == "switch s1" and not third.open
    assert "switch is the likelier culprit" in third.reason
    assert state.tripped_groups == {"switch s1": T0} and state.tripped_at is None


def test_a_tripped_switch_refuses_further_drains_under_it_but_not_elsewhere() -> None:
    state = BreakerState()
    for i, node in enumerate(("node1", "node3", "node4")):
        state, _ = ask(state, f"i{i}", node)
    state, again = ask(state, "i9", "node2", at=timedelta(minutes=20))  # the window passed, the cool-down not
    assert not again.allowed and again.group == "switch s1"
    state, elsewhere = ask(state, "i10", "node7")
    assert elsewhere.allowed
    state, cooled = ask(state, "i11", "node2", at=timedelta(minutes=31))
    assert cooled.allowed


def test_a_rack_limit_counts_across_switches_and_reset_clears_group_trips() -> None:
    state = BreakerState()
    state, _ = ask(state, "i1", "node1")
    state, _ = ask(state, "i2", "node5")
    state, _ = ask(state, "i3", "node6")
    state, fourth = ask(state, "i4", "node2")
    assert not fourth.allowed and fourth.group == "rack r1"
    state = reset(state)
    assert state.tripped_groups == {}


def test_no_limit_without_a_map_or_with_limit_zero() -> None:
    policy = POLICY.model_copy(update={"max_drains_per_switch": 0, "max_drains_per_rack": 0})
    state = BreakerState()
    for i, node in enumerate(("node1", "node2", "node3", "node4")):
        state, verdict = decide(state, DrainRequest(incident_id=f"i{i}", nodes=(node,)), T0, policy)
        assert verdict.allowed


def test_a_malformed_topology_map_is_a_settings_error() -> None:
    with pytest.raises(ValidationError):
        TopologyGroup(name="s1", nodes="node[1-")


def test_an_operators_approval_passes_the_switch_limit_but_not_the_clusters() -> None:
    state = BreakerState()
    for i, node in enumerate(("node1", "node3", "node4")):
        state, _ = ask(state, f"i{i}", node)
    state, approved = decide(state, DrainRequest(incident_id="i2", nodes=("node4",), approved_past_groups=True),
                             T0, POLICY)
    assert approved.allowed
    tight = POLICY.model_copy(update={"max_drained_nodes": 3})
    _, refused = decide(state, DrainRequest(incident_id="i5", nodes=("node2",), approved_past_groups=True), T0, tight)
    assert not refused.allowed and refused.open
