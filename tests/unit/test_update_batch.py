"""Asks made while an update is in flight go together as the next one, each getting its own answer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from activities.adapters.update_batch import UpdateBatcher

pytestmark = pytest.mark.timeout(10)


class Entity:
    """An entity workflow's stand-in: one update at a time, each slow enough for asks to pile up."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.in_flight = self.most_in_flight = 0
        self.fail_on = fail_on

    async def send(self, asks: Sequence[int]) -> list[int]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.batches.append(list(asks))
            await asyncio.sleep(0.05)
            if self.fail_on in asks:
                raise ConnectionError("update refused")
            return [ask * 10 for ask in asks]
        finally:
            self.in_flight -= 1


async def test_a_storm_of_asks_is_a_few_updates_one_at_a_time_with_each_answer_its_own() -> None:
    entity = Entity()
    batcher = UpdateBatcher(entity.send, max_batch=40)
    answers = await asyncio.gather(*(batcher.ask(i) for i in range(100)))
    assert answers == [i * 10 for i in range(100)]
    assert entity.most_in_flight == 1
    assert [len(b) for b in entity.batches] == [40, 40, 20]  # asked together, sent max_batch at a time
    assert sorted(i for b in entity.batches for i in b) == list(range(100))


async def test_a_failed_update_fails_only_its_own_batch() -> None:
    entity = Entity(fail_on=3)
    batcher = UpdateBatcher(entity.send)
    first = asyncio.create_task(batcher.ask(1))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(batcher.ask(i)) for i in (2, 3, 4)]
    assert await first == 10
    for task in rest:
        with pytest.raises(ConnectionError):
            await task
    assert await batcher.ask(5) == 50  # the next ask starts a fresh update


async def test_a_cancelled_ask_is_not_sent_and_the_others_still_get_answers() -> None:
    entity = Entity()
    batcher = UpdateBatcher(entity.send)
    first = asyncio.create_task(batcher.ask(1))
    await asyncio.sleep(0)
    gone, kept = asyncio.create_task(batcher.ask(2)), asyncio.create_task(batcher.ask(3))
    await asyncio.sleep(0)
    gone.cancel()
    assert (await first, await kept) == (10, 30)
    assert entity.batches == [[1], [3]]


async def test_answers_that_do_not_match_the_asks_fail_them() -> None:
    async def short(asks: Sequence[int]) -> list[int]:
        return [0]

    batcher = UpdateBatcher(short)
    results = await asyncio.gather(batcher.ask(1), batcher.ask(2), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)  # whose answer is the one? nobody's


async def test_a_batch_stops_before_its_bytes_pass_the_bound_but_takes_one_however_large() -> None:
    entity = Entity()
    # Ask i weighs i bytes; at most 10 bytes a batch, and ask 50 alone is over it.
    batcher = UpdateBatcher(entity.send, max_batch=500, weigh=lambda ask: ask, max_bytes=10)
    answers = await asyncio.gather(*(batcher.ask(i) for i in (50, 1, 2, 3, 4, 5, 6)))
    assert answers == [500, 10, 20, 30, 40, 50, 60]
    assert entity.batches == [[50], [1, 2, 3, 4], [5], [6]]
    assert all(sum(b) <= 10 for b in entity.batches[1:])
