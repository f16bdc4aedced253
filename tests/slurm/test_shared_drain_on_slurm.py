"""On the lab: node incidents under one leaf switch drain as one fault after the first (#29).

The lab's topology puts every node under leaf switch `lableaf` (scripts/slurm-lab/up.sh). A first
node incident (node1) opens the fault and drains with its own reason; two more (node2 and node3,
two incident ids, one observed time) isolate at the same moment through the recovery activities
and the real CLI backend: one `scontrol update` drains both, and slurmctld's log shows each node
drained once with the fault's reason, which names the fault, not either incident. Ownership stays
per node: a resume with any other reason is refused, return to service puts each node back only on
its own exact reason, and an admin's re-drain still wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult, LocalRunner
from activities.recovery import RecoveryActivities
from goodput.ownership import drain_reason, owning_incident
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import IsolateInput, IsolateResult
from goodput.recover.node_health import ReturnInput
from goodput.recover.node_incident import NodeIncidentPolicy
from goodput.recover.policy import Policy
from goodput.recover.shared_fault import owning_fault
from goodput.scheduler import NotOwnedError
from tests.fakes.notifier import RecordingNotifier

from .conftest import Lab, SlurmRecords

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]

TICK_S = 1.0  # as in test_storm_batch_on_slurm: a shared two-core host spreads the arrivals
AT = datetime(2026, 12, 4, 1, 0, 5, tzinfo=UTC)
FAULT = f"fault-switch-lableaf-{int(AT.timestamp())}"  # anchored on the first incident isolated


class CountingRunner(LocalRunner):
    """The real runner; records every `scontrol update`."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if tuple(argv[:2]) == ("scontrol", "update"):
            self.updates.append(tuple(argv))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


async def _isolate(activities: RecoveryActivities, incident: str, node: str) -> IsolateResult:
    return await ActivityEnvironment().run(activities.isolate, IsolateInput(
        incident_id=incident, nodes=(node,), summary=f"{node}: GPU fell off the bus", observed_at=AT))


async def test_one_switchs_node_incidents_drain_as_one_fault_and_return_on_their_own_reason(
        lab: Lab, records: SlurmRecords) -> None:
    runner = CountingRunner()
    policy = Policy(node_incident=NodeIncidentPolicy(shared_drain_window_s=60.0))
    activities = RecoveryActivities(SlurmCliBackend(runner, coalesce_tick_s=TICK_S), RecordingNotifier(),
                                    LocalDrainGate(), policy=policy)
    opener = await _isolate(activities, "incident-a", "node1")
    first, second = await asyncio.gather(_isolate(activities, "incident-b", "node2"),
                                         _isolate(activities, "incident-c", "node3"))

    assert opener.drained == ("node1",) and opener.faults == ()  # the fault's first keeps its own reason
    assert owning_incident(lab.node("node1")["Reason"]) == "incident-a"
    assert first.drained == ("node2",) and second.drained == ("node3",)
    assert first.faults == second.faults == (FAULT,)
    drains = [argv for argv in runner.updates if any(a.startswith("Reason=") for a in argv)]
    assert len(drains) == 2 and drains[1][2] in ("NodeName=node2,node3", "NodeName=node3,node2"), runner.updates
    reasons = {n: records.drains(n) for n in ("node1", "node2", "node3")}
    assert [len(r) for r in reasons.values()] == [1, 1, 1], records.text()
    assert {owning_fault(lab.node(n)["Reason"]) for n in ("node2", "node3")} == {FAULT}

    backend = SlurmCliBackend()
    other = drain_reason("fault-switch-lableaf-0", "another fault's drain")
    with pytest.raises(NotOwnedError):  # another fault's reason, even goodput's, is not this drain
        await backend.resume_node("node2", other)
    assert "DRAIN" in lab.node("node2")["State"]
    lab.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=admin: cable check")
    # A return tracking another incident (its drain since replaced by this fault's) leaves node2 alone.
    stale = await ActivityEnvironment().run(activities.return_node, ReturnInput(
        cluster="lab", node="node2", incident_id="incident-z"))
    assert not stale.returned and f"drained again by goodput for fault {FAULT}" in stale.detail, stale
    assert "DRAIN" in lab.node("node2")["State"]
    # Each node's return tracks the incident that drained it and the faults its drains shared.
    tracked = {"node1": ("incident-a", opener.faults), "node2": ("incident-b", first.faults),
               "node3": ("incident-c", second.faults)}
    returned = [await ActivityEnvironment().run(activities.return_node, ReturnInput(
                    cluster="lab", node=n, incident_id=tracked[n][0], faults=tracked[n][1]))
                for n in ("node1", "node2", "node3")]
    assert returned[0].returned and returned[1].returned, returned
    assert all("DRAIN" not in lab.node(n)["State"] for n in ("node1", "node2"))
    assert not returned[2].returned and "someone else" in returned[2].detail  # the admin's drain wins
    assert lab.node("node3")["Reason"].startswith("admin: cable check")
    lab.run("scontrol", "update", "NodeName=node3", "State=RESUME")
