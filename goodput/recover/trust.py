"""A track record per rule at this site, and the autonomy a rule has earned from it.

Sites are told to validate goodput in monitor or approve mode before they let it act alone; this
module turns that validation from an impression into numbers. Every recommendation a rule (the
deciding signature, or the verdict's category when no signature decided) makes is recorded with
its fate: approved, cancelled with a reason kind, a drained node that came back with no fault
found, the same job failing the same way on other nodes, a recovery verified. `autonomy` reads
that record against the site's bar (`AutonomyPolicy`) and an operator's pin and says whether the
rule may act alone, and why. Pure: the record lives in one TrustRecordWorkflow per cluster
(workflows/trust.py); `goodput trust` shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from pydantic import Field

from goodput.models import Frozen, Mode, OperatorDecision

# Per rule, the newest events kept; and how many rules one cluster's record holds at most.
MAX_EVENTS_PER_RULE = 200
MAX_RULES = 500
_WRONG_RECENT = 3  # cancelled as wrong in this many ...
_RECENT = 5  # ... of the rule's last this many recommendations


class ReasonKind(StrEnum):
    """Why an operator cancelled: the kind is what the record counts, the text is for people."""

    WRONG_DIAGNOSIS = "wrong-diagnosis"
    WRONG_NODE = "wrong-node"
    NOT_NEEDED = "not-needed"
    OTHER = "other"


WRONG = frozenset({ReasonKind.WRONG_DIAGNOSIS, ReasonKind.WRONG_NODE})


class Fate(StrEnum):
    RECOMMENDED = "recommended"
    AGREED = "agreed"  # an operator approved it
    DISAGREED = "disagreed"  # an operator cancelled it (with a reason kind)
    FALSE_DRAIN = "false-drain"  # a node it drained passed return to service with no fault found
    JOB_NOT_NODE = "job-not-node"  # the same job failed the same way again on other nodes
    VERIFIED = "verified"  # the recovery it led to was verified


class TrustEvent(Frozen):
    """One thing that happened to one of a rule's recommendations."""

    rule: str = Field(min_length=1, max_length=200)
    fate: Fate
    incident_id: str = Field(max_length=256)
    at: datetime
    reason_kind: ReasonKind | None = None
    job_id: str = Field(default="", max_length=64)
    nodes: tuple[str, ...] = Field(default=(), max_length=64)


class Pin(Frozen):
    mode: Mode
    by: OperatorDecision
    at: datetime


class RuleRecord(Frozen):
    rule: str
    events: tuple[TrustEvent, ...] = ()  # oldest first, at most MAX_EVENTS_PER_RULE
    pin: Pin | None = None
    level: Mode | None = None  # the autonomy last computed, to audit its changes


class AutonomyPolicy(Frozen):
    """The bar a rule's record must clear before it may act alone in an autonomous partition."""

    # False: autonomous partitions act on every verdict, as before records existed (the record is
    # still kept and shown). True: only a rule that earned it acts alone, on a `high` verdict.
    earned: bool = True
    min_decisions: int = Field(default=20, ge=0, le=MAX_EVENTS_PER_RULE)
    min_agreement: float = Field(default=0.95, ge=0.0, le=1.0)
    no_false_drain_window_days: float = Field(default=30.0, ge=0.0, le=3650.0)


class RuleSummary(Frozen):
    """One rule's line in `goodput trust`."""

    rule: str
    recommendations: int
    agreed: int
    disagreed: int
    wrong: int
    false_drains: int
    job_not_node: int
    verified: int
    autonomy: Mode
    why: str
    pinned: bool = False


def recorded(record: RuleRecord, event: TrustEvent) -> RuleRecord:
    """The record with `event` added; one fate per incident and kind counts once (deliveries repeat)."""
    if any(e.incident_id == event.incident_id and e.fate is event.fate for e in record.events):
        return record
    events = (*record.events, event)[-MAX_EVENTS_PER_RULE:]
    return record.model_copy(update={"events": events})


def _count(events: Sequence[TrustEvent], fate: Fate) -> int:
    return sum(1 for e in events if e.fate is fate)


def wrong_of_last(events: Sequence[TrustEvent], last: int = _RECENT) -> int:
    """How many of the rule's last `last` recommendations an operator cancelled as wrong."""
    recent = [e.incident_id for e in events if e.fate is Fate.RECOMMENDED][-last:]
    wrong = {e.incident_id for e in events if e.fate is Fate.DISAGREED and e.reason_kind in WRONG}
    return sum(1 for incident in recent if incident in wrong)


def autonomy(record: RuleRecord, bar: AutonomyPolicy, now: datetime) -> tuple[Mode, str]:
    """How much the rule may do alone, and why: its pin if an operator set one; otherwise
    autonomous only once its record clears the bar, approval until then."""
    if record.pin is not None:
        return record.pin.mode, f"pinned to {record.pin.mode} by {record.pin.by.who}: {record.pin.by.reason}"
    events = record.events
    wrong = wrong_of_last(events)
    if wrong >= _WRONG_RECENT:
        return Mode.APPROVE, f"cancelled as wrong in {wrong} of its last {_RECENT} recommendations"
    since = now - timedelta(days=bar.no_false_drain_window_days)
    false_drains = [e for e in events if e.fate is Fate.FALSE_DRAIN and e.at >= since]
    if false_drains:
        return Mode.APPROVE, (f"a node it drained came back with no fault found on {false_drains[-1].at:%Y-%m-%d} "
                              f"(within {bar.no_false_drain_window_days:g} days)")
    agreed, disagreed = _count(events, Fate.AGREED), _count(events, Fate.DISAGREED)
    decisions = agreed + disagreed
    if decisions < bar.min_decisions:
        return Mode.APPROVE, f"{decisions} operator decisions, {bar.min_decisions} needed"
    agreement = agreed / decisions if decisions else 1.0
    if agreement < bar.min_agreement:
        return Mode.APPROVE, f"{agreement:.0%} agreement over {decisions} decisions, {bar.min_agreement:.0%} needed"
    return Mode.AUTONOMOUS, f"earned: {agreement:.0%} agreement over {decisions} decisions, no recent false drain"


_RANK = {Mode.MONITOR: 0, Mode.APPROVE: 1, Mode.AUTONOMOUS: 2}


def incident_mode(partition: Mode, rule: Mode, why: str, *, pinned: bool, confidence: str | None,
                  bar: AutonomyPolicy) -> tuple[Mode, str]:
    """The mode one incident runs in: the partition's, capped by its rule's autonomy. An unpinned
    rule acts alone only on a `high` verdict; a pin is the operator's word and stands as set.
    Without `bar.earned` only a pin changes anything."""
    if not bar.earned and not pinned:
        return partition, ""
    if not pinned and rule is Mode.AUTONOMOUS and confidence != "high":
        rule, why = Mode.APPROVE, f"the verdict is {confidence or 'ungraded'}, not high ({why})"
    if _RANK[rule] < _RANK[partition]:
        return rule, f"rule autonomy {rule}: {why}"
    return partition, ""


def summary(record: RuleRecord, bar: AutonomyPolicy, now: datetime) -> RuleSummary:
    events = record.events
    level, why = autonomy(record, bar, now)
    return RuleSummary(
        rule=record.rule, recommendations=_count(events, Fate.RECOMMENDED), agreed=_count(events, Fate.AGREED),
        disagreed=_count(events, Fate.DISAGREED),
        wrong=sum(1 for e in events if e.fate is Fate.DISAGREED and e.reason_kind in WRONG),
        false_drains=_count(events, Fate.FALSE_DRAIN), job_not_node=_count(events, Fate.JOB_NOT_NODE),
        verified=_count(events, Fate.VERIFIED), autonomy=level, why=why, pinned=record.pin is not None)


def job_not_node(record: RuleRecord, event: TrustEvent) -> TrustEvent | None:
    """A new recommendation of the rule for a job it already blamed on nodes disjoint from these:
    the job, not the node. The event to record against the earlier recommendation, if any."""
    if event.fate is not Fate.RECOMMENDED or not event.job_id or not event.nodes:
        return None
    for earlier in reversed(record.events):
        if (earlier.fate is Fate.RECOMMENDED and earlier.job_id == event.job_id and earlier.nodes
                and earlier.incident_id != event.incident_id and not set(earlier.nodes) & set(event.nodes)):
            return earlier.model_copy(update={"fate": Fate.JOB_NOT_NODE, "at": event.at})
    return None


def parse_reason(text: str) -> tuple[ReasonKind, str]:
    """`wrong-node: gpu-b17 is fine` → (wrong-node, the rest); text without a known kind is `other`."""
    head, sep, rest = text.partition(":")
    try:
        kind = ReasonKind(head.strip().lower())
    except ValueError:
        return ReasonKind.OTHER, text
    return kind, (rest.strip() if sep else "") or kind.value


class TrustState(Frozen):
    """One cluster's records, one per rule (the entity workflow's state)."""

    rules: tuple[RuleRecord, ...] = ()

    def get(self, rule: str) -> RuleRecord:
        return next((r for r in self.rules if r.rule == rule), RuleRecord(rule=rule))


class LevelChange(Frozen):
    """A rule's autonomy moved (earned, lost, pinned): each is audited."""

    rule: str
    before: Mode | None
    after: Mode
    why: str
    by: OperatorDecision | None = None


def _put(state: TrustState, record: RuleRecord, now: datetime) -> TrustState:
    others = [r for r in state.rules if r.rule != record.rule]
    if len(others) >= MAX_RULES:  # the rule heard from least recently (and not pinned) goes first
        others.sort(key=lambda r: (r.pin is not None, r.events[-1].at if r.events else now))
        others = others[1:]
    return state.model_copy(update={"rules": (*others, record)})


def _relevel(record: RuleRecord, bar: AutonomyPolicy, now: datetime,
             by: OperatorDecision | None = None) -> tuple[RuleRecord, LevelChange | None]:
    level, why = autonomy(record, bar, now)
    if level is record.level:
        return record, None
    change = LevelChange(rule=record.rule, before=record.level, after=level, why=why, by=by)
    return record.model_copy(update={"level": level}), change


def note(state: TrustState, event: TrustEvent, bar: AutonomyPolicy,
         now: datetime) -> tuple[TrustState, tuple[LevelChange, ...]]:
    """The state with one event recorded (and what it tells of earlier ones), and the autonomy
    changes it caused."""
    record = state.get(event.rule)
    earlier = job_not_node(record, event)
    record = recorded(record, event)
    if earlier is not None:
        record = recorded(record, earlier)
    record, change = _relevel(record, bar, now)
    return _put(state, record, now), (change,) if change else ()


def pinned(state: TrustState, rule: str, mode: Mode | None, by: OperatorDecision, bar: AutonomyPolicy,
           now: datetime) -> tuple[TrustState, tuple[LevelChange, ...]]:
    """The state with the rule pinned to `mode` (None: unpinned, back to its record)."""
    record = state.get(rule).model_copy(update={"pin": Pin(mode=mode, by=by, at=now) if mode else None})
    record, change = _relevel(record, bar, now, by)
    if change is None:  # a pin that leaves the level as it was is still the operator's act
        change = LevelChange(rule=rule, before=record.level, after=record.level or Mode.APPROVE,
                             why=autonomy(record, bar, now)[1], by=by)
    return _put(state, record, now), (change,)


class RuleAutonomy(Frozen):
    """What the record says to one incident about its rule."""

    rule: str
    level: Mode
    why: str
    pinned: bool = False


class TrustInput(Frozen):
    """A recovery's report of one event to its cluster's record (the `consult_trust` activity)."""

    cluster: str
    event: TrustEvent
    # None (return to service, which knows no incident policy): the bar the record last used.
    bar: AutonomyPolicy | None = None


class TrustRecord(Protocol):
    """The cluster's record of rules: durable in a TrustRecordWorkflow, in memory in tests."""

    async def note(self, cluster: str, event: TrustEvent, bar: AutonomyPolicy | None) -> RuleAutonomy:
        """Records `event`; the rule's autonomy after it."""
        ...


class LocalTrustRecord:
    """One process's record, for a worker built without Temporal-backed entities (unit tests)."""

    def __init__(self) -> None:
        self.states: dict[str, TrustState] = {}

    async def note(self, cluster: str, event: TrustEvent, bar: AutonomyPolicy | None) -> RuleAutonomy:
        bar = bar or AutonomyPolicy()
        state, _ = note(self.states.get(cluster, TrustState()), event, bar, event.at)
        self.states[cluster] = state
        return standing_of(state.get(event.rule), bar, event.at)


def standing_of(record: RuleRecord, bar: AutonomyPolicy, now: datetime) -> RuleAutonomy:
    level, why = autonomy(record, bar, now)
    return RuleAutonomy(rule=record.rule, level=level, why=why, pinned=record.pin is not None)
