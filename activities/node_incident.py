"""The activity that links a job incident to its node's fault (workflows.node_link).

Workflows cannot start or update another workflow themselves, so the link, an update-with-start
on the node incident, runs here; everything after it (the leader's report, the decision handed
to incidents waiting) travels as signals between the workflows. Its own module because it has
nothing to do with the scheduler the recovery activities wrap.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import activity

from goodput.recover.node_incident import LinkAnswer, LinkRequest, NodeIncidents


class NodeIncidentActivities:
    def __init__(self, incidents: NodeIncidents) -> None:
        self._incidents = incidents

    @activity.defn(name="link_node_incident")
    async def link_node_incident(self, request: LinkRequest) -> LinkAnswer:
        return await self._incidents.link(request)

    def all(self) -> list[Callable[..., Awaitable[object]]]:
        return [self.link_node_incident]
