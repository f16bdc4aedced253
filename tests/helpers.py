"""Test apparatus shared across suites: one copy of each small helper instead of one per file.

Polling lives here too: a test waits on a condition (never on a sleep that decides the outcome)
through `eventually` (async) or `wait_until` (blocking), both bounded and both failing with what
was awaited and the last value seen."""

from __future__ import annotations

import asyncio
import inspect
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago (tests bind only loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _late(timeout: float, what: str, last: object) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g} s waiting for {what}; last: {last!r}")


@overload
async def eventually(probe: Callable[[], Awaitable[T]], accept: Callable[[T], object] = bool, *,
                     timeout: float = 30.0, interval: float = 0.2, what: str = "condition") -> T: ...


@overload
async def eventually(probe: Callable[[], T], accept: Callable[[T], object] = bool, *,
                     timeout: float = 30.0, interval: float = 0.2, what: str = "condition") -> T: ...


async def eventually(probe: Callable[[], Any], accept: Callable[[Any], object] = bool, *,
                     timeout: float = 30.0, interval: float = 0.2, what: str = "condition") -> Any:
    """Poll `probe` (a coroutine function or a plain callable) until `accept` holds for what it
    returns, and return that; after `timeout` seconds fail with what was awaited and the last value.

    The probe always runs at least once, and once more after the deadline has passed, so a slow
    machine fails only on a condition that really did not hold."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise _late(timeout, what, value)
        await asyncio.sleep(interval)


def wait_until(probe: Callable[[], T], accept: Callable[[T], object] = bool, *, timeout: float = 30.0,
               interval: float = 0.2, what: str = "condition") -> T:
    """`eventually` for blocking code (fixtures that drive a lab through subprocesses)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise _late(timeout, what, value)
        time.sleep(interval)
