"""One fetch per refresh, however many browsers watch the same view.

Every open incident list holds a server-sent-events stream that re-reads its page and the counts
per state every `refresh_s`; twenty operators on the same view would otherwise cost Temporal
twenty times the visibility queries. Results are shared by key (the view's query string) for one
refresh period, and concurrent callers wait for the one fetch in flight instead of starting
their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
MAX_KEYS = 256


class SharedRefresh(Generic[T]):
    def __init__(self, ttl_s: float) -> None:
        self._ttl = ttl_s
        self._entries: dict[str, tuple[float, asyncio.Future[T]]] = {}

    async def get(self, key: str, fetch: Callable[[], Awaitable[T]]) -> T:
        loop = asyncio.get_running_loop()
        now = loop.time()
        entry = self._entries.get(key)
        if entry is None or now - entry[0] >= self._ttl:
            future: asyncio.Future[T] = asyncio.ensure_future(fetch())
            # A failure is shared too, for one period: retrying it per browser would not help.
            future.add_done_callback(lambda f: f.exception())
            self._entries[key] = (now, future)
            if len(self._entries) > MAX_KEYS:
                oldest = min(self._entries, key=lambda k: self._entries[k][0])
                del self._entries[oldest]
            entry = self._entries[key]
        # Shielded: a browser that disconnects mid-fetch must not cancel the others' result.
        return await asyncio.shield(entry[1])
