"""A job waiting for capacity after a recovery says what it is missing."""

from __future__ import annotations

from goodput.recover.capacity import capacity_note, usable
from goodput.scheduler import NodeInfo


def node(name: str, state: str, *flags: str) -> NodeInfo:
    return NodeInfo(name=name, state=state, flags=flags)


NODES = [node("n1", "IDLE"), node("n2", "IDLE", "DRAIN"), node("n3", "ALLOCATED"), node("n4", "DOWN"),
         node("n5", "IDLE"), node("n6", "MIXED")]


def test_unusable_nodes_are_drained_down_or_out_of_service() -> None:
    assert [n.name for n in NODES if usable(n)] == ["n1", "n3", "n5", "n6"]
    assert not usable(node("n7", "IDLE", "MAINTENANCE")) and not usable(node("n8", "IDLE", "NOT_RESPONDING"))


def test_the_note_says_how_short_the_job_is_and_why() -> None:
    note = capacity_note(NODES, excluded=("n5", "n6"), needed=4)
    assert note == ("needs 4 node(s); 2 usable node(s) not excluded, 1 free now; too few even when all are "
                    "free: 2 short; 2 drained or down; 2 excluded for this job (n5, n6)")
    assert capacity_note(NODES, excluded=(), needed=None) == (
        "4 usable node(s) not excluded, 2 free now; 2 drained or down")
