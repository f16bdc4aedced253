"""The cluster drain breaker: a budget of drained nodes per window, then open until cool-down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.recover.breaker import BreakerPolicy, BreakerState, DrainRequest, decide, reset

T0 = datetime(2026, 11, 29, 12, tzinfo=UTC)
POLICY = BreakerPolicy(max_drained_nodes=3, window_s=600, cooldown_s=1800)


def ask(state: BreakerState, incident: str, *nodes: str, at: timedelta = timedelta()) -> tuple[BreakerState, bool]:
    state, verdict = decide(state, DrainRequest(incident_id=incident, nodes=nodes), T0 + at, POLICY)
    return state, verdict.allowed


def test_grants_within_budget_then_trips() -> None:
    state = BreakerState()
    state, ok1 = ask(state, "i1", "n1")
    state, ok2 = ask(state, "i2", "n2", "n3")
    state, ok3 = ask(state, "i3", "n4")
    assert (ok1, ok2, ok3) == (True, True, False)
    assert state.trips == 1 and state.tripped_at == T0
    # Open: even a small request is refused until the cool-down passes.
    state, ok4 = ask(state, "i4", "n5", at=timedelta(minutes=29))
    assert not ok4 and state.refused == 2


def test_retry_of_a_granted_request_is_not_counted_twice() -> None:
    state, _ = ask(BreakerState(), "i1", "n1", "n2")
    for _ in range(5):
        state, ok = ask(state, "i1", "n1", "n2")
        assert ok
    state, ok = ask(state, "i2", "n3")
    assert ok


def test_window_slides_and_cooldown_closes() -> None:
    state, _ = ask(BreakerState(), "i1", "n1", "n2", "n3")
    state, ok = ask(state, "i2", "n4", at=timedelta(minutes=5))
    assert not ok
    state, ok = ask(state, "i3", "n5", at=timedelta(minutes=36))
    assert ok  # cooled down, and the old grants have left the window


def test_operator_reset_closes_the_breaker() -> None:
    state, _ = ask(BreakerState(), "i1", "n1", "n2", "n3", "n4")
    assert state.tripped_at is not None
    state = reset(state)
    state, ok = ask(state, "i2", "n9", at=timedelta(minutes=11))
    assert ok
