"""A rule's autonomy answered from a worker's snapshot of the track record, when that is safe (#29).

Why: in a storm every incident tells the cluster's record of its recommendation and waits for the
rule's autonomy, and each such answer was a round trip through the record's entity workflow, its
tasks queued behind every incident's. The record changes only when an incident closes (the
operator's word, a verified recovery), a drained node comes back, or an operator pins a rule, so a
worker may answer a recommendation from a snapshot of every rule's standing (the record's
`standings` query) and deliver the event itself as a durable signal.

Safety: a snapshot may be stale, and the earned-autonomy rules must never let it grant autonomy
the record would refuse. So the snapshot answers only when the rule is **not** autonomous in it
(approval, or a pin to monitor); a rule that is autonomous, a bar other than the one the snapshot
was computed with, a snapshot older than `STALE_AFTER_S`, or any event but a recommendation goes
the round trip as before. What staleness can still do, for at most `STALE_AFTER_S`: keep a rule
that just earned autonomy (or was pinned up) asking for approval, which is more cautious, and
miss a pin to monitor made meanwhile from another process, in which case the incident asks an
operator's approval instead of only watching: it never acts alone on a snapshot.
"""

from __future__ import annotations

from goodput.models import Frozen, Mode
from goodput.recover.trust import AutonomyPolicy, Fate, RuleAutonomy, RuleRecord, TrustEvent, standing_of

# How old a snapshot (from when its query was sent) may be and still answer; half of it on, the
# worker refreshes it in the background so a steady stream of incidents never waits for one.
STALE_AFTER_S = 10.0


class TrustSnapshot(Frozen):
    """Every rule's standing in one cluster's record, and the bar they were computed with."""

    bar: AutonomyPolicy
    rules: tuple[RuleAutonomy, ...] = ()


def answered(snapshot: TrustSnapshot, event: TrustEvent, bar: AutonomyPolicy | None) -> RuleAutonomy | None:
    """The autonomy to answer `event` with from `snapshot`, or None when only the record may say."""
    if event.fate is not Fate.RECOMMENDED or (bar is not None and bar != snapshot.bar):
        return None
    standing = next((r for r in snapshot.rules if r.rule == event.rule), None)
    if standing is None:  # a rule the record has never heard of: its empty record's standing
        standing = standing_of(RuleRecord(rule=event.rule), snapshot.bar, event.at)
    if standing.level is Mode.AUTONOMOUS:
        return None
    return standing


def drops_snapshot(event: TrustEvent) -> bool:
    """Whether telling the record `event` may have raised some rule's autonomy (an operator's word
    or a drain's outcome), so this worker's snapshot is refreshed before it answers again. A
    verified recovery changes no autonomy, and a recommendation can only raise one (it pushes an
    older recommendation out of the last five), which leaves the snapshot the more cautious."""
    return event.fate not in (Fate.RECOMMENDED, Fate.VERIFIED)
