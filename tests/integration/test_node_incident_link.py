"""The link activity tells the node incident whether the node is still out of service.

Found by the as-shipped latency benchmark on the lab: node3, drained for an Xid and put back into
service by an operator, lost its slurmd a minute later; the new job incident joined the old
fault's "drained" decision, so nothing drained node3 again and the next jobs landed on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from temporalio.testing import ActivityEnvironment

from activities.node_incident import NodeIncidentActivities
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.models import Mode
from goodput.recover.node_incident import LinkAnswer, LinkRequest, Role
from goodput.scheduler import NodeInfo, SchedulerError

pytestmark = pytest.mark.timeout(30)


class Recorded:
    def __init__(self) -> None:
        self.requests: list[LinkRequest] = []

    async def link(self, request: LinkRequest) -> LinkAnswer:
        self.requests.append(request)
        return LinkAnswer(node_incident_id="node-incident/c1/node3", role=Role.LEAD)


class Unreachable(FakeScheduler):
    async def get_node(self, name: str) -> NodeInfo:
        raise SchedulerError("slurmctld is not answering")

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        raise SchedulerError("slurmctld is not answering")


def request(acts: bool = True) -> LinkRequest:
    return LinkRequest(cluster="c1", node="node3", incident_id="inc-1", job_id="1", acts=acts,
                       mode=Mode.AUTONOMOUS if acts else Mode.MONITOR)


async def node_out_seen(scheduler: FakeScheduler | None, acts: bool = True) -> bool | None:
    incidents = Recorded()
    await ActivityEnvironment().run(NodeIncidentActivities(incidents, scheduler).link_node_incident, request(acts))
    [sent] = incidents.requests
    return sent.node_out


async def test_the_node_state_goes_with_the_link() -> None:
    fake = FakeScheduler()
    assert await node_out_seen(fake) is False  # in service
    await fake.drain_node("node3", "goodput: xid 79")
    assert await node_out_seen(fake) is True
    assert await node_out_seen(Unreachable()) is None  # unknown: the decision is trusted
    assert await node_out_seen(None) is None
    assert await node_out_seen(fake, acts=False) is None  # monitor mode only records


async def test_a_resumed_node_whose_slurmd_dies_again_is_in_service_for_the_link() -> None:
    """#33, the latency benchmark's second batch of node failures: node3 drained for a dead slurmd,
    resumed by the operator, then its slurmd killed again. Slurm flags it NOT_RESPONDING (the new
    fault itself), which used to count as "still out", so the new incident joined the old "drained"
    decision and nothing drained node3 again. Only a drain or Slurm's DOWN keeps jobs off a node."""
    def with_node3(state: str, *flags: str) -> FakeScheduler:
        cluster = demo_cluster()
        cluster.nodes["node3"] = cluster.nodes["node3"].model_copy(update={"state": state, "flags": flags})
        return FakeScheduler(cluster)

    assert await node_out_seen(with_node3("ALLOCATED", "NOT_RESPONDING")) is False
    assert await node_out_seen(with_node3("DOWN", "NOT_RESPONDING")) is True
    assert await node_out_seen(with_node3("IDLE", "DRAIN", "NOT_RESPONDING")) is True
