"""Where every asyncio task of a timed-out test was waiting.

pytest-timeout prints the threads' stacks when a test runs past its limit, but an async test's
threads all sit in the event loop's select(): the await that never returned is invisible. A
little before the limit this prints each task's await chain (coroutine by coroutine, down to the
future it waits on), so an intermittent hang on the lab names its step in the CI log.
"""

from __future__ import annotations

import asyncio
import sys
from types import CoroutineType, FrameType
from typing import Any

# Printed this long before pytest-timeout's own limit, so both reports reach the log.
LEAD_S = 10.0


def _frame_of(awaitable: Any) -> FrameType | None:
    for attribute in ("cr_frame", "gi_frame", "ag_frame"):
        frame = getattr(awaitable, attribute, None)
        if frame is not None:
            return frame  # type: ignore[no-any-return]
    return None


def await_chain(coro: CoroutineType[Any, Any, Any] | Any) -> list[str]:
    """`file:line function` for each coroutine `coro` is suspended in, outermost first."""
    chain: list[str] = []
    current: Any = coro
    for _ in range(200):  # a cycle cannot happen in CPython, but a dump must never hang
        frame = _frame_of(current)
        if frame is None:
            if current is not None and current is not coro:
                chain.append(f"waiting on {current!r}"[:300])
            break
        chain.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        current = (getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
                   or getattr(current, "ag_await", None))
        if current is None:
            break
    return chain


def dump_tasks(test: str, file: Any = None) -> None:
    out = file or sys.stderr
    print(f"\n~~~~~ asyncio tasks of {test}, {LEAD_S:.0f} s before its timeout ~~~~~", file=out)
    for task in asyncio.all_tasks():
        print(f"task {task.get_name()}: {task.get_coro()!r}", file=out)
        for step in await_chain(task.get_coro()):
            print(f"    {step}", file=out)
    out.flush()


def timeout_of(config: Any, marker: Any) -> float:
    if marker is not None and marker.args:
        return float(marker.args[0])
    if marker is not None and "timeout" in marker.kwargs:
        return float(marker.kwargs["timeout"])
    return float(config.getini("timeout") or 0)
