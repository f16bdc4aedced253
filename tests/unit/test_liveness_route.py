"""Where a workflow schedules what reads the agents' stores: here, the liveness process, or nowhere."""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from activities.liveness_route import LivenessRouteActivities
from goodput.detect.liveness_route import LivenessRoute, liveness_queue

pytestmark = pytest.mark.timeout(10)


class Presence:
    def __init__(self, served: bool | Exception) -> None:
        self.queue = liveness_queue("goodput")
        self._served = served
        self.asked = 0

    async def served(self) -> bool:
        self.asked += 1
        if isinstance(self._served, Exception):
            raise self._served
        return self._served


async def route(presence: Presence, *, here: bool = False) -> LivenessRoute:
    return await ActivityEnvironment().run(LivenessRouteActivities(presence, here=here).liveness_route)


async def test_the_queue_is_named_after_the_services() -> None:
    assert liveness_queue("goodput") == "goodput-liveness"


async def test_a_process_serving_liveness_itself_answers_without_asking_temporal() -> None:
    presence = Presence(False)
    assert await route(presence, here=True) == LivenessRoute(queue="goodput-liveness")
    assert presence.asked == 0


async def test_another_process_polling_the_queue_is_the_route() -> None:
    assert await route(Presence(True)) == LivenessRoute(queue="goodput-liveness")


async def test_nobody_polling_is_no_route_and_says_why() -> None:
    found = await route(Presence(False))
    assert found.queue is None and "no process serves goodput-liveness" in found.note


async def test_temporal_not_answering_still_tries_the_queue_bounded_by_its_schedule_to_start() -> None:
    assert await route(Presence(RuntimeError("permission denied"))) == LivenessRoute(queue="goodput-liveness")
