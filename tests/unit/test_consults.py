"""When the track record may hear an incident's recommendation beside the node memory (#29).

The record is told only of a plan that passed its gates; asked beside the memory, it hears the
recommendation before the plan is made, so that must be only where the memory cannot change the
plan (goodput.recover.consults). A rule that let a drain through, or a verdict that convicts a
node, would tell the record of plans the blast radius may still refuse.
"""

from __future__ import annotations

from datetime import UTC, datetime

from goodput.diagnose.node_memory import MemoryVerdict, NodeStanding
from goodput.models import Attribution, Category, Culprit, CulpritKind
from goodput.recover.consults import asked_together, told_together

CRASH = Attribution(category=Category.NCCL_TIMEOUT, rule="category:nccl_timeout")
SUSPECT = NodeStanding(node="node1", score=2.0, jobs=("1", "2"), users=("alice", "bob"),
                       last_at=datetime(2026, 1, 1, tzinfo=UTC), suspect=True)


def test_only_a_ruled_attribution_that_drains_nothing_is_asked_together() -> None:
    assert asked_together(CRASH)
    assert not asked_together(CRASH.model_copy(update={"rule": ""}))  # the record keeps rules
    drained = CRASH.model_copy(update={"drain": True, "culprits": (
        Culprit(kind=CulpritKind.NODE, id="node1", confidence=0.9),)})
    assert not asked_together(drained)  # its plan may still meet the blast radius


def test_the_record_hears_it_only_when_the_memory_convicts_no_node() -> None:
    assert told_together(MemoryVerdict())
    assert told_together(MemoryVerdict(roaming_job=True, note="roams"))  # blames the job, drains nothing
    assert not told_together(MemoryVerdict(suspects=(SUSPECT,)))
