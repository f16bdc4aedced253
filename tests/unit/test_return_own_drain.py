"""Return to service resumes a node only while its drain is the one the return tracks: the
incident's own reason or a shared fault's reason that incident's drains carried. A later drain by
goodput for another incident (or another fault), or an administrator's, is left in place."""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from activities.recovery import RecoveryActivities
from goodput.demo.scheduler import FakeScheduler
from goodput.ownership import drain_reason
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.node_health import ReturnInput, ReturnResult
from tests.fakes.notifier import RecordingNotifier

FAULT_A = "fault-switch-leaf1-1796346000"
FAULT_B = "fault-switch-leaf1-1796349600"


async def _return(reason: str, request: ReturnInput) -> tuple[ReturnResult, FakeScheduler]:
    fake = FakeScheduler()
    await fake.drain_node(request.node, reason)
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    back = await ActivityEnvironment().run(activities.return_node, request)
    return back, fake


TRACKING_A = ReturnInput(cluster="demo", node="node2", incident_id="inc-A", faults=(FAULT_A,))


@pytest.mark.parametrize("reason", [drain_reason("inc-A", "Xid 79 on node2"),
                                    drain_reason(FAULT_A, "GPU fault under switch leaf1")])
async def test_the_tracked_drain_is_undone(reason: str) -> None:
    back, fake = await _return(reason, TRACKING_A)
    assert back.returned, back
    node = await fake.get_node("node2")
    assert not node.drained and node.reason == ""


@pytest.mark.parametrize(("reason", "says"), [
    (drain_reason("inc-B", "Xid 48 on node2"), "drained again by goodput for incident inc-B"),
    (drain_reason(FAULT_B, "GPU fault under switch leaf1"), f"drained again by goodput for fault {FAULT_B}"),
    ("admin: cable check", "drained by someone else"),
])
async def test_any_other_drain_is_left_alone(reason: str, says: str) -> None:
    back, fake = await _return(reason, TRACKING_A)
    assert not back.returned and says in back.detail and back.detail.endswith("left alone"), back
    node = await fake.get_node("node2")
    assert node.drained and node.reason == reason
    assert [e.op for e in fake.journal()] == ["drain"]  # no resume was sent


async def test_an_input_recorded_before_the_tracked_incident_takes_any_goodput_reason() -> None:
    """A return_node scheduled by a workflow from before `return-own-drain` (its input, recorded in
    history, names no incident) behaves as it did: any goodput reason, never an admin's."""
    old = ReturnInput(cluster="demo", node="node2")
    back, _ = await _return(drain_reason("inc-B", "Xid 48 on node2"), old)
    assert back.returned
    back, _ = await _return("admin: cable check", old)
    assert not back.returned
