"""The return-to-service activities: hand a drained node to its NodeHealthWorkflow, run the site's
health check on it, and resume it.

Kept apart from the recovery steps (activities.recovery) because they act for a different
workflow (workflows.node_health) on a node rather than a job. `RecoveryActivities` inherits them, so
their names and their registration (`RecoveryActivities.all()`) are what they were. Resuming is
the one effect here that gives capacity back, so it checks first that the node's drain is still the
one its return tracks (goodput.recover.node_health.not_ours): an administrator's later drain, or
goodput's own for another incident, is left in place.
"""

from __future__ import annotations

from temporalio import activity

from activities.scheduler_calls import heartbeating, mapped
from goodput.recover.incident import NodeHealthRequest
from goodput.recover.node_health import (
    CheckResult,
    NodeCheck,
    NodeCheckInput,
    NodeHealthStarter,
    ReturnInput,
    ReturnResult,
    not_ours,
)
from goodput.scheduler import Scheduler


class NodeReturnActivities:
    """Set by `RecoveryActivities.__init__`: the scheduler, the health check and the workflow starter."""

    _scheduler: Scheduler
    _node_check: NodeCheck
    _node_health: NodeHealthStarter | None

    @activity.defn(name="start_node_health")
    async def start_node_health(self, request: NodeHealthRequest) -> None:
        if self._node_health is None:
            return
        async with heartbeating():
            for node in request.nodes:
                await self._node_health.drained(request.cluster, node, request.incident_id, request.policy,
                                                rule=request.rule, spares=request.spares, faults=request.faults)

    @activity.defn(name="check_node")
    async def check_node(self, request: NodeCheckInput) -> CheckResult:
        async with heartbeating():
            return await self._node_check.run(request.argv, request.timeout_s)

    @activity.defn(name="return_node")
    async def return_node(self, request: ReturnInput) -> ReturnResult:
        async with heartbeating():
            node = await mapped(self._scheduler.get_node(request.node))
            if not node.drained:
                return ReturnResult(returned=False, detail=f"{node.name} is not drained any more: someone resumed it")
            why_not = not_ours(node.name, node.reason, request)
            if why_not:
                return ReturnResult(returned=False, detail=why_not)
            # Resumed only while the reason is still the one just read: a drain in between wins.
            result = await mapped(self._scheduler.resume_node(node.name, node.reason))
        return ReturnResult(returned=result.changed, detail=result.detail)
