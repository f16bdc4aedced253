"""What a recovery incident tells its cluster's track record, and what the record tells it back.

The incident reports its recommendation when it decides whether to act (and learns its rule's
autonomy: goodput.recover.trust), then, as it closes, the operator's decision on it and whether
the recovery was verified. Writing to the record must never fail an incident: a record that
cannot be reached leaves the incident in the mode its partition sets, with a timeline line.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from goodput.models import Attribution
    from goodput.recover.incident import AttributeResult, DecisionVerb
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.trust import Fate, RuleAutonomy, TrustEvent, TrustInput, parse_reason
    from workflows.recovery_steps import Incident

_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                     maximum_interval=timedelta(seconds=10), maximum_attempts=5)


def _input(incident: Incident, event: TrustEvent) -> TrustInput:
    return TrustInput(cluster=incident.start.key.cluster, event=event, bar=incident.start.policy.autonomy)


async def _tell(incident: Incident, event: TrustEvent) -> RuleAutonomy | str:
    """Not `incident.step`: an operator's cancel must not cancel the report of that very cancel."""
    try:
        answer: RuleAutonomy = await workflow.execute_activity(
            "consult_trust", _input(incident, event),
            result_type=RuleAutonomy, start_to_close_timeout=timedelta(seconds=60), retry_policy=_RETRY)
    except ActivityError as err:
        return f"track record not reached ({err.cause or err})"
    return answer


def _event(incident: Incident, rule: str, fate: Fate, **kw: object) -> TrustEvent:
    return TrustEvent.model_validate({"rule": rule, "fate": fate, "incident_id": incident.id,
                                      "at": workflow.now(), "job_id": incident.start.key.job_id, **kw})


def recommendation(incident: Incident, attribution: Attribution) -> TrustInput:
    """What the record is told of the incident's recommendation under its deciding rule."""
    return _input(incident, _event(incident, attribution.rule, Fate.RECOMMENDED,
                                   nodes=attribution.culprit_nodes[:64] if attribution.drain else ()))


async def recommended(incident: Incident, attributed: AttributeResult) -> RuleAutonomy | None:
    """Records the incident's recommendation under its deciding rule; the rule's autonomy. Under
    `fewer-steps` the record may have heard it already, beside the node memory
    (workflows.recovery_actions.remember): then its answer is taken, not asked again."""
    attribution = attributed.attribution
    if not attribution.rule:
        return None
    early = incident.told_early()
    if early is not None and early.rule == attribution.rule:
        return early
    answer = await _tell(incident, recommendation(incident, attribution).event)
    if isinstance(answer, str):
        incident.record(incident.incident.state, answer)
        return None
    return answer


async def closed(incident: Incident, rule: str) -> None:
    """Reports the fate of the incident's recommendation: the operator's word, and a verified recovery."""
    s = incident.incident
    events = []
    if s.decision is not None and s.decision.verb is DecisionVerb.APPROVE:
        events.append(_event(incident, rule, Fate.AGREED))
    elif s.decision is not None:
        kind, _ = parse_reason(s.decision.by.reason)
        events.append(_event(incident, rule, Fate.DISAGREED, reason_kind=kind))
    if s.state is IncidentState.RECOVERED:
        events.append(_event(incident, rule, Fate.VERIFIED))
    for event in events:
        answer = await _tell(incident, event)
        if isinstance(answer, str):
            incident.record(s.state, answer)
