"""A worker's snapshot of the track record answers a recommendation only when it cannot grant
autonomy the record would refuse (goodput.recover.trust_snapshot, #29)."""

from __future__ import annotations

from datetime import UTC, datetime

from goodput.models import Mode
from goodput.recover.trust import AutonomyPolicy, Fate, RuleAutonomy, TrustEvent
from goodput.recover.trust_snapshot import TrustSnapshot, answered, drops_snapshot

AT = datetime(2026, 12, 4, tzinfo=UTC)
BAR = AutonomyPolicy()


def event(rule: str = "xid-79", fate: Fate = Fate.RECOMMENDED) -> TrustEvent:
    return TrustEvent(rule=rule, fate=fate, incident_id="inc-1", at=AT)


def snapshot(*rules: RuleAutonomy, bar: AutonomyPolicy = BAR) -> TrustSnapshot:
    return TrustSnapshot(bar=bar, rules=rules)


def test_a_rule_waiting_for_approval_is_answered_from_the_snapshot() -> None:
    standing = RuleAutonomy(rule="xid-79", level=Mode.APPROVE, why="3 operator decisions, 20 needed")
    assert answered(snapshot(standing), event(), BAR) == standing
    assert answered(snapshot(standing), event(), None) == standing  # no bar of its own: the record's


def test_an_autonomous_rule_is_always_asked_of_the_record() -> None:
    earned = RuleAutonomy(rule="xid-79", level=Mode.AUTONOMOUS, why="earned")
    pinned = RuleAutonomy(rule="xid-79", level=Mode.AUTONOMOUS, why="pinned", pinned=True)
    assert answered(snapshot(earned), event(), BAR) is None
    assert answered(snapshot(pinned), event(), BAR) is None


def test_a_pin_to_monitor_is_answered_as_pinned() -> None:
    monitor = RuleAutonomy(rule="xid-79", level=Mode.MONITOR, why="pinned to monitor by dave", pinned=True)
    assert answered(snapshot(monitor), event(), BAR) == monitor


def test_a_rule_the_record_never_heard_of_stands_on_an_empty_record_under_the_bar() -> None:
    fresh = answered(snapshot(), event("new-rule"), BAR)
    assert fresh is not None and fresh.level is Mode.APPROVE and "0 operator decisions, 20 needed" in fresh.why
    # A bar that needs no decisions lets an empty record act alone: only the record may say so.
    lax = AutonomyPolicy(min_decisions=0)
    assert answered(snapshot(bar=lax), event("new-rule"), lax) is None


def test_another_bar_or_another_fate_goes_to_the_record() -> None:
    standing = RuleAutonomy(rule="xid-79", level=Mode.APPROVE, why="")
    assert answered(snapshot(standing), event(), AutonomyPolicy(min_decisions=5)) is None
    for fate in set(Fate) - {Fate.RECOMMENDED}:
        assert answered(snapshot(standing), event(fate=fate), BAR) is None


def test_only_events_that_may_raise_autonomy_drop_the_snapshot() -> None:
    assert {f for f in Fate if drops_snapshot(event(fate=f))} == {
        Fate.AGREED, Fate.DISAGREED, Fate.FALSE_DRAIN, Fate.JOB_NOT_NODE}
