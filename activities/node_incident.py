"""The activity that links a job incident to its node's fault (workflows.node_link).

Workflows cannot start or update another workflow themselves, so the link, an update-with-start
on the node incident, runs here; everything after it (the leader's report, the decision handed
to incidents waiting) travels as signals between the workflows. It asks the scheduler one
thing first: whether the node is still out of service, for a node put back since the fault's
decision that fails again is a new fault (goodput.recover.node_incident).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from temporalio import activity

from goodput.detect.scheduler_watch import node_down
from goodput.recover.node_incident import LinkAnswer, LinkRequest, NodeIncidents
from goodput.scheduler import Scheduler, SchedulerError

log = logging.getLogger("goodput.node_incident")


class NodeIncidentActivities:
    def __init__(self, incidents: NodeIncidents, scheduler: Scheduler | None = None) -> None:
        self._incidents = incidents
        self._scheduler = scheduler

    @activity.defn(name="link_node_incident")
    async def link_node_incident(self, request: LinkRequest) -> LinkAnswer:
        if request.acts and self._scheduler is not None:
            request = request.model_copy(update={"node_out": await self._node_out(request.node)})
        return await self._incidents.link(request)

    async def _node_out(self, name: str) -> bool | None:
        """Whether the node is out of service now; None when the scheduler cannot say (the link
        then trusts the fault's decision, as before this was asked)."""
        try:
            node = await self._scheduler.get_node(name) if self._scheduler else None
        except SchedulerError as err:
            log.warning("node %s: state unknown for its node incident: %s", name, err)
            return None
        if node is None:
            return None
        # Drained, or DOWN/FAIL by Slurm: what keeps jobs off it. Not NOT_RESPONDING alone: a node
        # resumed after the fault's drain whose slurmd dies again is flagged so by that new fault
        # itself, and joining the old decision left it undrained (the latency benchmark's second
        # batch of node failures, #33).
        return node.drained or node_down(node)

    def all(self) -> list[Callable[..., Awaitable[object]]]:
        return [self.link_node_incident]
