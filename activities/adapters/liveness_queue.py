"""Whether a process polls the liveness task queue, as Temporal sees it (`DescribeTaskQueue`).

No setting has to say where `[liveness]` runs: the chart's worker pods run with it off and still
learn that its pod is up, because that pod polls `<task_queue>-liveness`. Temporal lists a poller
for a few minutes after its last poll, so a liveness process that just died still reads as present;
the activity scheduled there then meets its schedule-to-start bound (workflows.hang_stacks), a
short, recorded wait instead of a silent one. Answers are cached briefly: a burst of incidents asks
once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from goodput.detect.liveness_route import liveness_queue

CACHE_S = 10.0
DESCRIBE_TIMEOUT_S = 5.0


class TemporalLivenessPresence:
    """`served()`: some worker polls the liveness queue for activities."""

    def __init__(self, client: Client, task_queue: str, *, cache_s: float = CACHE_S,
                 clock: Callable[[], float] | None = None) -> None:
        self._client = client
        self.queue = liveness_queue(task_queue)
        self._cache_s = cache_s
        self._clock = clock
        self._known: tuple[float, bool] | None = None

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def served(self) -> bool:
        now = self._now()
        if self._known is not None and now - self._known[0] < self._cache_s:
            return self._known[1]
        response = await self._client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(namespace=self._client.namespace,
                                     task_queue=TaskQueue(name=self.queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                                     task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
            timeout=timedelta(seconds=DESCRIBE_TIMEOUT_S))
        served = len(response.pollers) > 0
        self._known = (now, served)
        return served
