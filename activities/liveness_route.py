"""`liveness_route`: where a workflow schedules what reads the agents' in-memory stores.

Served by every worker on the shared queue. A worker that runs the liveness process itself answers
at once; any other asks Temporal whether some process polls the liveness queue
(`activities.adapters.liveness_queue`). "Nobody" is an answer the workflow records and goes on
with, so a deployment without `[liveness]` costs a hang incident one short activity, not a bound
waited out. When Temporal cannot be asked, the route is given anyway: the activity scheduled there
is bounded by its schedule-to-start timeout, and the workflow records why it got nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from temporalio import activity

from goodput.detect.liveness_route import LivenessRoute, no_liveness

log = logging.getLogger("goodput.liveness")


class LivenessPresence(Protocol):
    """Whether a process polls the liveness queue (real: `TemporalLivenessPresence`)."""

    @property
    def queue(self) -> str: ...

    async def served(self) -> bool: ...


class LivenessRouteActivities:
    """`liveness_route`; `here`: this process polls the liveness queue itself."""

    def __init__(self, presence: LivenessPresence, *, here: bool = False) -> None:
        self._presence, self._here = presence, here

    @activity.defn(name="liveness_route")
    async def liveness_route(self) -> LivenessRoute:
        queue = self._presence.queue
        if self._here:
            return LivenessRoute(queue=queue)
        try:
            served = await self._presence.served()
        except Exception as err:  # cannot tell: try it, bounded by the schedule-to-start timeout
            log.warning("cannot tell whether %s is served: %s: %s", queue, type(err).__name__, str(err)[:200])
            return LivenessRoute(queue=queue)
        return LivenessRoute(queue=queue) if served else no_liveness(queue)

    def all(self) -> list[Callable[..., Awaitable[Any]]]:
        return [self.liveness_route]
