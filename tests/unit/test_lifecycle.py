"""The incident state machine: legal paths pass, illegal moves raise."""

from __future__ import annotations

import pytest

from goodput.recover.lifecycle import (
    OUTCOME_OF,
    TERMINAL,
    TRANSITIONS,
    IllegalTransitionError,
    IncidentState,
    transition,
)

S = IncidentState

HAPPY_PATHS = [
    [S.DETECTED, S.ATTRIBUTED, S.PLANNED, S.RECOMMENDED_ONLY],
    [S.DETECTED, S.ATTRIBUTED, S.PLANNED, S.ISOLATING, S.RESUMING, S.VERIFYING, S.RECOVERED],
    [S.DETECTED, S.ATTRIBUTED, S.PLANNED, S.AWAITING_APPROVAL, S.ISOLATING, S.RESUMING,
     S.VERIFYING, S.RESUMING, S.VERIFYING, S.RECOVERED],
    [S.DETECTED, S.ATTRIBUTED, S.PLANNED, S.AWAITING_APPROVAL, S.CANCELLED],
    [S.DETECTED, S.ATTRIBUTED, S.PLANNED, S.ISOLATING, S.STOPPED],
    # restarted in-job by the job's launcher: followed until it gives up, then recovered by goodput
    [S.DETECTED, S.ATTRIBUTED, S.PLANNED, S.FOLLOWING_LAUNCHER, S.ATTRIBUTED, S.PLANNED, S.RESUMING,
     S.VERIFYING, S.RECOVERED],
    # ... or the launcher kept the job running: nothing for goodput to do
    [S.DETECTED, S.ATTRIBUTED, S.PLANNED, S.ISOLATING, S.FOLLOWING_LAUNCHER, S.STOPPED],
]


@pytest.mark.parametrize("path", HAPPY_PATHS, ids=lambda p: "->".join(p))
def test_legal_paths(path: list[IncidentState]) -> None:
    state = path[0]
    for target in path[1:]:
        state = transition(state, target)
    assert state is path[-1]


@pytest.mark.parametrize(("current", "target"), [
    (S.DETECTED, S.RECOVERED),           # never recovered without verification
    (S.PLANNED, S.VERIFYING),
    (S.RESUMING, S.RECOVERED),
    (S.RECOVERED, S.RESUMING),           # terminal states are final
    (S.CANCELLED, S.ISOLATING),
    (S.RECOMMENDED_ONLY, S.ISOLATING),
    (S.FOLLOWING_LAUNCHER, S.RESUMING),  # a launcher's later verdict is attributed before any action
])
def test_illegal_moves_raise(current: IncidentState, target: IncidentState) -> None:
    with pytest.raises(IllegalTransitionError, match=f"{current} -> {target}"):
        transition(current, target)


def test_every_active_state_can_be_cancelled_or_escalated() -> None:
    for state, targets in TRANSITIONS.items():
        if state not in TERMINAL:
            assert {S.CANCELLED, S.ESCALATED} <= targets, state


def test_terminal_states_have_outcomes_and_no_exits() -> None:
    assert set(OUTCOME_OF) == TERMINAL
    assert all(not TRANSITIONS[t] for t in TERMINAL)
