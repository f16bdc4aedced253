"""Concurrent asks of one entity workflow ride one update, so a storm does not hit Temporal's limit.

Every incident consults its cluster's node memory and drain breaker, each one workflow per
cluster, through an update. Temporal admits at most 10 updates in flight per workflow execution
and refuses the rest; the callers retry with backoff. The storm benchmark on the Slurm lab saw a
requeue that takes 1.6 s alone take 62-93 s for 100 incidents at once, all of it spent waiting on
the node memory. Here, while one update is in flight, later asks queue in this process and go
together as the next update (the workflow answers each in order, exactly as it would one by one),
so a worker process holds at most one update in flight per entity workflow whatever the storm.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from workflows.update_batch import MAX_BATCH

Ask = TypeVar("Ask")
Answer = TypeVar("Answer")


class UpdateBatcher(Generic[Ask, Answer]):
    """`ask` returns this request's answer from a batch sent with `send` (one answer per request,
    in order). A failed send fails every ask of its batch; the caller's retry asks again."""

    def __init__(self, send: Callable[[Sequence[Ask]], Awaitable[Sequence[Answer]]],
                 max_batch: int = MAX_BATCH, weigh: Callable[[Ask], int] | None = None,
                 max_bytes: int = 0) -> None:
        self._send = send
        self._max = max_batch
        # With `weigh`, a batch also stops before its requests pass `max_bytes` (always one at least).
        self._weigh = weigh
        self._max_bytes = max_bytes
        self._queue: list[tuple[Ask, asyncio.Future[Answer]]] = []
        self._sender: asyncio.Task[None] | None = None
        self.batches = 0

    async def ask(self, request: Ask) -> Answer:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._queue:
            taken = self._taken()
            batch, self._queue = self._queue[:taken], self._queue[taken:]
            live = [(request, future) for request, future in batch if not future.done()]  # cancelled asks
            if not live:
                continue
            self.batches += 1
            try:
                answers = await self._send([request for request, _ in live])
                if len(answers) != len(live):
                    raise RuntimeError(f"{len(answers)} answers for {len(live)} requests")
            except Exception as err:  # the asks fail with the send's own error, and are retried as theirs
                _fail(live, err)
                continue
            except asyncio.CancelledError:  # the worker is stopping: nobody may wait for ever
                _fail([*live, *self._queue], RuntimeError("stopped while asking"))
                self._queue = []
                raise
            for (_, future), answer in zip(live, answers, strict=True):
                if not future.done():
                    future.set_result(answer)

    def _taken(self) -> int:
        """How many queued asks the next batch takes: at most `max_batch`, and within `max_bytes`."""
        if self._weigh is None:
            return self._max
        total = 0
        for taken, (request, _) in enumerate(self._queue[:self._max]):
            total += self._weigh(request)
            if taken and total > self._max_bytes:
                return taken
        return self._max


def _fail(asks: Sequence[tuple[object, asyncio.Future[Answer]]], err: Exception) -> None:
    for _, future in asks:
        if not future.done():
            future.set_exception(err)
