"""Scheduler calls inside activities: errors mapped to Temporal's retry semantics, heartbeats
while a slow call runs.

Every activity that talks to the scheduler goes through `mapped`, so "retry this" versus "give
up" is decided in one place, not once per activity.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import PermanentSchedulerError, TransientSchedulerError

T = TypeVar("T")
HEARTBEAT_EVERY_S = 1.0


async def mapped(call: Awaitable[T]) -> T:
    """The single place where scheduler errors become Temporal retry semantics."""
    try:
        return await call
    except TransientSchedulerError as err:
        raise ApplicationError(str(err), type="TransientSchedulerError") from err
    except (PermanentSchedulerError, InvalidIdentifierError) as err:
        raise ApplicationError(str(err), type=type(err).__name__, non_retryable=True) from err


@asynccontextmanager
async def heartbeating(detail: Callable[[], object] = lambda: None) -> AsyncIterator[None]:
    """Heartbeat while a slow scheduler call runs, so a dead worker is noticed in seconds. The
    first beat waits one interval: a step done within it (most are, in ms) needs none, and each
    beat is a frontend call and a write in Temporal's store (a storm's incidents sent 6 each, #29)."""
    if activity.info().is_local:  # it runs inside its workflow task, which the worker keeps alive
        yield
        return

    async def beat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_S)
            activity.heartbeat(detail())

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
