"""goodput.recover.trust: each rule of `autonomy`, the record's bounds, and the incident's mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.models import Mode, OperatorDecision
from goodput.recover.trust import (
    MAX_EVENTS_PER_RULE,
    AutonomyPolicy,
    Fate,
    Pin,
    ReasonKind,
    RuleRecord,
    TrustEvent,
    TrustState,
    autonomy,
    incident_mode,
    note,
    parse_reason,
    pinned,
    summary,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)
BAR = AutonomyPolicy(earned=True, min_decisions=4, min_agreement=0.75, no_false_drain_window_days=30)
ALICE = OperatorDecision(who="alice", reason="known good")


def ev(n: int, fate: Fate, kind: ReasonKind | None = None, *, at: datetime = NOW, job: str = "",
       nodes: tuple[str, ...] = ()) -> TrustEvent:
    return TrustEvent(rule="xid-79", fate=fate, incident_id=f"inc-{n}", at=at, reason_kind=kind, job_id=job,
                      nodes=nodes)


def record_of(*events: TrustEvent) -> RuleRecord:
    return RuleRecord(rule="xid-79", events=events)


def agreed(n: int) -> list[TrustEvent]:
    return [e for i in range(n) for e in (ev(i, Fate.RECOMMENDED), ev(i, Fate.AGREED))]


def test_an_empty_record_waits_for_approval() -> None:
    assert autonomy(record_of(), BAR, NOW) == (Mode.APPROVE, "0 operator decisions, 4 needed")


def test_enough_agreement_earns_autonomy() -> None:
    level, why = autonomy(record_of(*agreed(4)), BAR, NOW)
    assert level is Mode.AUTONOMOUS and "100% agreement over 4 decisions" in why


def test_too_little_agreement_keeps_approval() -> None:
    events = [*agreed(3), ev(9, Fate.RECOMMENDED), ev(9, Fate.DISAGREED, ReasonKind.NOT_NEEDED),
              ev(10, Fate.RECOMMENDED), ev(10, Fate.DISAGREED, ReasonKind.OTHER)]
    assert autonomy(record_of(*events), BAR, NOW) == (Mode.APPROVE, "60% agreement over 5 decisions, 75% needed")


def test_three_of_the_last_five_cancelled_as_wrong_falls_back_to_approval() -> None:
    events = [*agreed(40)]
    for n, kind in ((50, ReasonKind.WRONG_NODE), (51, None), (52, ReasonKind.WRONG_DIAGNOSIS),
                    (53, ReasonKind.WRONG_NODE)):
        events.append(ev(n, Fate.RECOMMENDED))
        events.append(ev(n, Fate.DISAGREED, kind) if kind else ev(n, Fate.AGREED))
    assert autonomy(record_of(*events), BAR, NOW) == (
        Mode.APPROVE, "cancelled as wrong in 3 of its last 5 recommendations")


def test_cancelled_as_not_needed_is_not_wrong() -> None:
    events = [*agreed(40)]
    for n in range(50, 53):
        events += [ev(n, Fate.RECOMMENDED), ev(n, Fate.DISAGREED, ReasonKind.NOT_NEEDED)]
    assert autonomy(record_of(*events), BAR, NOW)[0] is Mode.AUTONOMOUS


def test_wrong_cancellations_older_than_the_last_five_recommendations_are_forgiven() -> None:
    events = []
    for n in range(3):
        events += [ev(n, Fate.RECOMMENDED), ev(n, Fate.DISAGREED, ReasonKind.WRONG_NODE)]
    events += [e for i in range(10, 60) for e in (ev(i, Fate.RECOMMENDED), ev(i, Fate.AGREED))]
    assert autonomy(record_of(*events), BAR, NOW)[0] is Mode.AUTONOMOUS


def test_a_false_drain_in_the_window_keeps_approval_and_one_outside_does_not() -> None:
    recent = record_of(*agreed(10), ev(3, Fate.FALSE_DRAIN, at=NOW - timedelta(days=29)))
    assert autonomy(recent, BAR, NOW)[0] is Mode.APPROVE
    assert "no fault found" in autonomy(recent, BAR, NOW)[1]
    old = record_of(*agreed(10), ev(3, Fate.FALSE_DRAIN, at=NOW - timedelta(days=31)))
    assert autonomy(old, BAR, NOW)[0] is Mode.AUTONOMOUS


def test_a_pin_overrides_the_record_either_way() -> None:
    bad = record_of(*[e for n in range(5) for e in (ev(n, Fate.RECOMMENDED),
                                                       ev(n, Fate.DISAGREED, ReasonKind.WRONG_NODE))])
    pin = Pin(mode=Mode.AUTONOMOUS, by=ALICE, at=NOW)
    level, why = autonomy(bad.model_copy(update={"pin": pin}), BAR, NOW)
    assert level is Mode.AUTONOMOUS and why == "pinned to autonomous by alice: known good"
    good = record_of(*agreed(10)).model_copy(update={"pin": pin.model_copy(update={"mode": Mode.MONITOR})})
    assert autonomy(good, BAR, NOW)[0] is Mode.MONITOR


def test_an_incident_acts_alone_only_on_a_high_verdict_of_an_earned_rule() -> None:
    assert incident_mode(Mode.AUTONOMOUS, Mode.AUTONOMOUS, "earned", pinned=False, confidence="high",
                         bar=BAR) == (Mode.AUTONOMOUS, "")
    mode, why = incident_mode(Mode.AUTONOMOUS, Mode.AUTONOMOUS, "earned", pinned=False, confidence="medium", bar=BAR)
    assert mode is Mode.APPROVE and "medium, not high" in why
    assert incident_mode(Mode.AUTONOMOUS, Mode.APPROVE, "2 decisions", pinned=False, confidence="high",
                         bar=BAR)[0] is Mode.APPROVE
    # A pin to autonomous stands whatever the grade; the partition's mode stays the ceiling.
    assert incident_mode(Mode.AUTONOMOUS, Mode.AUTONOMOUS, "pinned", pinned=True, confidence=None,
                         bar=BAR)[0] is Mode.AUTONOMOUS
    assert incident_mode(Mode.APPROVE, Mode.AUTONOMOUS, "pinned", pinned=True, confidence="high",
                         bar=BAR)[0] is Mode.APPROVE
    assert incident_mode(Mode.APPROVE, Mode.MONITOR, "pinned", pinned=True, confidence="high",
                         bar=BAR)[0] is Mode.MONITOR


def test_without_earned_autonomy_only_a_pin_changes_the_mode() -> None:
    off = BAR.model_copy(update={"earned": False})
    assert incident_mode(Mode.AUTONOMOUS, Mode.APPROVE, "x", pinned=False, confidence=None, bar=off)[0] \
        is Mode.AUTONOMOUS
    assert incident_mode(Mode.AUTONOMOUS, Mode.MONITOR, "x", pinned=True, confidence=None, bar=off)[0] is Mode.MONITOR


def test_the_record_is_bounded_and_counts_each_fate_once_per_incident() -> None:
    state = TrustState()
    for n in range(MAX_EVENTS_PER_RULE + 50):
        state, _ = note(state, ev(n, Fate.RECOMMENDED), BAR, NOW)
    state, _ = note(state, ev(1_000, Fate.AGREED), BAR, NOW)
    state, _ = note(state, ev(1_000, Fate.AGREED), BAR, NOW)
    assert len(state.get("xid-79").events) == MAX_EVENTS_PER_RULE
    assert summary(state.get("xid-79"), BAR, NOW).agreed == 1


def test_autonomy_changes_are_reported_once_each() -> None:
    state, changes = note(TrustState(), ev(0, Fate.RECOMMENDED), BAR, NOW)
    assert [(c.before, c.after) for c in changes] == [(None, Mode.APPROVE)]
    for event in agreed(4)[1:]:
        state, changes = note(state, event, BAR, NOW)
    assert [(c.before, c.after) for c in changes] == [(Mode.APPROVE, Mode.AUTONOMOUS)]
    state, changes = pinned(state, "xid-79", Mode.MONITOR, ALICE, BAR, NOW)
    assert [(c.before, c.after, c.by) for c in changes] == [(Mode.AUTONOMOUS, Mode.MONITOR, ALICE)]


def test_the_same_job_failing_again_on_other_nodes_marks_the_job_not_the_node() -> None:
    state, _ = note(TrustState(), ev(1, Fate.RECOMMENDED, job="42", nodes=("n1",)), BAR, NOW)
    state, _ = note(state, ev(2, Fate.RECOMMENDED, job="42", nodes=("n2",)), BAR, NOW)
    assert summary(state.get("xid-79"), BAR, NOW).job_not_node == 1
    state, _ = note(state, ev(3, Fate.RECOMMENDED, job="43", nodes=("n1",)), BAR, NOW)
    assert summary(state.get("xid-79"), BAR, NOW).job_not_node == 1


def test_a_cancel_reason_names_its_kind() -> None:
    assert parse_reason("wrong-node: gpu-b17 is fine") == (ReasonKind.WRONG_NODE, "gpu-b17 is fine")
    assert parse_reason("Wrong-Diagnosis") == (ReasonKind.WRONG_DIAGNOSIS, "wrong-diagnosis")
    assert parse_reason("maintenance window") == (ReasonKind.OTHER, "maintenance window")
