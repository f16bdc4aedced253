"""The incident state machine: the only legal paths from detection to an outcome.

Workflows move an incident through these states; a move that is not in the table raises, so a
bug in orchestration shows up as a failed workflow task in the Temporal UI instead of an incident
that silently claims to be `recovered` without ever having been verified.
"""

from __future__ import annotations

from enum import StrEnum

from goodput.models import Outcome


class IncidentState(StrEnum):
    DETECTED = "detected"
    ATTRIBUTED = "attributed"
    PLANNED = "planned"
    AWAITING_APPROVAL = "awaiting-approval"
    ISOLATING = "isolating"
    RESUMING = "resuming"
    VERIFYING = "verifying"
    RECOVERED = "recovered"
    STOPPED = "stopped"
    ESCALATED = "escalated"
    CANCELLED = "cancelled"
    RECOMMENDED_ONLY = "recommended-only"
    # The job's own launcher restarted it in-job: goodput watches for the launcher giving up.
    FOLLOWING_LAUNCHER = "following-launcher"
    # Every anomaly so far is evidence only (pushed lines not shown to be the job's own output):
    # goodput recommends and keeps the incident open for evidence it may act on.
    AWAITING_EVIDENCE = "awaiting-evidence"
    # A straggler's node will be excluded at the job's next restart; the job keeps running and
    # goodput follows it, to act on its later failure (goodput.recover.straggler_plan).
    PENDING_EXCLUSION = "pending-exclusion"


S = IncidentState

TERMINAL: frozenset[IncidentState] = frozenset(
    {S.RECOVERED, S.STOPPED, S.ESCALATED, S.CANCELLED, S.RECOMMENDED_ONLY}
)

# Every active state may be cancelled by an operator or escalated when a step fails for good.
_ALWAYS = {S.CANCELLED, S.ESCALATED}

TRANSITIONS: dict[IncidentState, frozenset[IncidentState]] = {
    S.DETECTED: frozenset({S.ATTRIBUTED} | _ALWAYS),
    S.ATTRIBUTED: frozenset({S.PLANNED} | _ALWAYS),
    S.PLANNED: frozenset(
        {S.AWAITING_APPROVAL, S.RECOMMENDED_ONLY, S.ISOLATING, S.RESUMING, S.STOPPED, S.FOLLOWING_LAUNCHER,
         S.AWAITING_EVIDENCE, S.PENDING_EXCLUSION}
        | _ALWAYS
    ),
    S.AWAITING_APPROVAL: frozenset({S.ISOLATING, S.RESUMING, S.STOPPED, S.FOLLOWING_LAUNCHER, S.PENDING_EXCLUSION}
                                   | _ALWAYS),
    # A drain past a switch's or rack's limit waits for an operator (goodput.recover.breaker).
    S.ISOLATING: frozenset({S.AWAITING_APPROVAL, S.RESUMING, S.STOPPED, S.FOLLOWING_LAUNCHER, S.PENDING_EXCLUSION}
                           | _ALWAYS),
    # Later evidence (the launcher gave up, exit code 93, the job ended) is weighed again; a
    # launcher that keeps the job running past the policy's window closes the incident.
    S.FOLLOWING_LAUNCHER: frozenset({S.ATTRIBUTED, S.STOPPED} | _ALWAYS),
    # New evidence is weighed again; none goodput may act on within the policy's window: a recommendation.
    S.AWAITING_EVIDENCE: frozenset({S.ATTRIBUTED, S.RECOMMENDED_ONLY} | _ALWAYS),
    # The job's later evidence (it failed, another verdict) is weighed again, the pending exclusion
    # with it; a job that ran the whole window without more evidence closes the incident.
    S.PENDING_EXCLUSION: frozenset({S.ATTRIBUTED, S.RECOMMENDED_ONLY} | _ALWAYS),
    S.RESUMING: frozenset({S.VERIFYING} | _ALWAYS),
    # A failed verification may spend another attempt from the retry budget.
    S.VERIFYING: frozenset({S.RECOVERED, S.RESUMING} | _ALWAYS),
    **{t: frozenset() for t in TERMINAL},
}

OUTCOME_OF: dict[IncidentState, Outcome] = {
    S.RECOVERED: Outcome.RECOVERED,
    S.STOPPED: Outcome.STOPPED,
    S.ESCALATED: Outcome.ESCALATED,
    S.CANCELLED: Outcome.CANCELLED,
    S.RECOMMENDED_ONLY: Outcome.RECOMMENDED_ONLY,
}


class IllegalTransitionError(RuntimeError):
    """An orchestration bug: the workflow tried a move the state machine forbids."""


def transition(current: IncidentState, target: IncidentState) -> IncidentState:
    if target not in TRANSITIONS[current]:
        raise IllegalTransitionError(f"illegal incident transition {current} -> {target}")
    return target


def is_terminal(state: IncidentState) -> bool:
    return state in TERMINAL
