"""tests/helpers.py's polling: one way to wait on a condition, with a bound and a message that says
what was awaited and what was last seen."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.helpers import eventually, wait_until

pytestmark = pytest.mark.timeout(30)


async def test_eventually_returns_the_first_accepted_value_of_an_async_probe() -> None:
    counter = itertools.count(1)

    async def probe() -> int:
        await asyncio.sleep(0)
        return next(counter)

    assert await eventually(probe, lambda n: n >= 3, timeout=10, interval=0.001) == 3


async def test_eventually_takes_a_plain_predicate_too() -> None:
    counter = itertools.count(1)
    assert await eventually(lambda: next(counter) >= 2, timeout=10, interval=0.001) is True


async def test_eventually_fails_with_what_it_waited_for_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.05 s waiting for the drain; last: 'no'"):
        await eventually(lambda: "no", lambda v: v == "yes", timeout=0.05, interval=0.01, what="the drain")


async def test_eventually_probes_at_least_once_even_with_no_time() -> None:
    assert await eventually(lambda: "ready", lambda v: v == "ready", timeout=0) == "ready"


def test_wait_until_is_the_same_for_blocking_code() -> None:
    counter = itertools.count(1)
    assert wait_until(lambda: next(counter), lambda n: n == 4, timeout=10, interval=0.001) == 4
    with pytest.raises(AssertionError, match=r"waiting for idle nodes; last: \['down'\]"):
        wait_until(lambda: ["down"], lambda s: s == ["idle"], timeout=0.05, interval=0.01, what="idle nodes")
