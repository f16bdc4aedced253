"""Browsers watching the same view share one fetch per refresh period."""

from __future__ import annotations

import asyncio

import pytest

from workers.console.shared import SharedRefresh


async def test_concurrent_watchers_share_one_fetch_and_a_later_one_fetches_again() -> None:
    calls = 0
    release = asyncio.Event()

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return calls

    shared: SharedRefresh[int] = SharedRefresh(ttl_s=0.05)
    waiters = [asyncio.create_task(shared.get("view", fetch)) for _ in range(20)]
    await asyncio.sleep(0.01)
    waiters[0].cancel()  # a browser that goes away does not cancel the others' result
    release.set()
    results = await asyncio.gather(*waiters[1:])
    assert results == [1] * 19 and calls == 1
    assert await shared.get("other view", fetch) == 2
    await asyncio.sleep(0.06)
    assert await shared.get("view", fetch) == 3


async def test_a_failed_fetch_is_shared_for_one_period_then_retried() -> None:
    outcomes = iter([RuntimeError("temporal down"), 7])

    async def fetch() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    shared: SharedRefresh[int] = SharedRefresh(ttl_s=0.05)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="temporal down"):
            await shared.get("view", fetch)
    await asyncio.sleep(0.06)
    assert await shared.get("view", fetch) == 7
