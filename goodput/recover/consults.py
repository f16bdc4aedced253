"""The node memory and the track record asked in one round trip (#29, "Fewer steps").

Why: in a storm each step to the requeue costs a workflow task, and the two entity consults were
two of them. An incident tells the record of its recommendation only once its plan passed the
gates, and the plan can change with the memory's verdict (a convicted node is drained, and a drain
can be refused by the blast radius). So the record is told in the same round trip only when the
plan cannot change that way: the incident's attribution drains nothing and the memory convicts no
node. Otherwise the incident asks the record on its own after planning, as before.
"""

from __future__ import annotations

from goodput.diagnose.node_memory import MemoryVerdict
from goodput.models import Attribution, Frozen
from goodput.recover.incident import MemoryInput
from goodput.recover.trust import RuleAutonomy, TrustInput


class MemoryTrustInput(Frozen):
    """One incident's report to its cluster's memory, and the recommendation the record hears
    when the memory convicts no node (the `consult_memory_and_trust` activity)."""

    memory: MemoryInput
    trust: TrustInput


class MemoryTrustResult(Frozen):
    """The memory's verdict; the rule's autonomy when the record was told (None: ask it later)."""

    verdict: MemoryVerdict
    trust: RuleAutonomy | None = None


def asked_together(attribution: Attribution) -> bool:
    """Whether the record may be asked beside the memory: a plan that drains nothing before the
    memory weighs in passes the blast radius, and a rule is what the record keeps."""
    return bool(attribution.rule) and not attribution.drain


def told_together(verdict: MemoryVerdict) -> bool:
    """Whether the memory left the plan as it was (no node convicted, so nothing to drain), so the
    record may hear the recommendation now."""
    return not verdict.suspects
