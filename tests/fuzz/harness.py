"""What every hostile-input suite asserts, in one place: a parser returns, or rejects cleanly.

A parser of job-controlled bytes may answer or raise one of its documented, typed errors with a
message; anything else escaping (IndexError, RecursionError, a pydantic ValidationError it
forgot to wrap) is a crash a Slurm user can trigger, and fails the example. Each call is
counted and timed per target; `make fuzz` writes the tallies that docs/security.md quotes.

Under `make fuzz` a call that spends more than CPU_LIMIT_S of CPU fails the example. The limit is
on the calling thread's CPU time, not the wall clock: a catastrophic regex or a quadratic parser
burns CPU, while on a 2-core machine shared with a test suite the wall clock also counts the
time the process waited for a core (a 130 ms call once measured 2.7 s that way). Blocking, which
burns no CPU, is caught by hypothesis's wall-clock deadline (tests/fuzz/conftest.py). Garbage
collection is left out, as hypothesis's own deadline leaves it out: a full collection of the
heap a 100,000-example run builds cost one 10-byte input 1.03 s of CPU once, and nothing on the
rerun.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from benchmarks._git import commit

T = TypeVar("T")

REPORT_ENV = "GOODPUT_FUZZ_REPORT"
CPU_LIMIT_S = 1.0
ENFORCE_CPU_LIMIT = os.environ.get("GOODPUT_FUZZ_PROFILE", "suite") == "fuzz"


class _GcClock:
    """CPU seconds this process has spent collecting garbage (collection runs on the thread that
    triggered it, so it lands inside whatever call was running)."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._started: float | None = None
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        elif self._started is not None:
            self.spent += time.thread_time() - self._started
            self._started = None


GC = _GcClock()


@dataclass
class Tally:
    examples: int = 0
    rejected: int = 0
    slowest_s: float = 0.0
    slowest_cpu_s: float = 0.0


TALLIES: dict[str, Tally] = {}


def rejects_cleanly(target: str, call: Callable[[], T],
                    allowed: tuple[type[BaseException], ...]) -> T | None:
    """`call()`'s result, or None when it raised one of `allowed` with a non-empty message."""
    tally = TALLIES.setdefault(target, Tally())
    started, cpu_started, gc_started = time.perf_counter(), time.thread_time(), GC.spent
    try:
        result: T | None = call()
    except allowed as error:
        tally.rejected += 1
        assert str(error).strip(), f"{target}: {type(error).__name__} raised without a message"
        result = None
    finally:
        cpu = time.thread_time() - cpu_started - (GC.spent - gc_started)
        tally.examples += 1
        tally.slowest_s = max(tally.slowest_s, time.perf_counter() - started)
        tally.slowest_cpu_s = max(tally.slowest_cpu_s, cpu)
    assert not ENFORCE_CPU_LIMIT or cpu <= CPU_LIMIT_S, \
        f"{target}: one input took {cpu:.2f} s of CPU, over the {CPU_LIMIT_S:g} s limit"
    return result


def write_report() -> None:
    """The tallies as JSON where GOODPUT_FUZZ_REPORT points (merged with what is there)."""
    path = os.environ.get(REPORT_ENV)
    if not path or not TALLIES:
        return
    target = Path(path)
    existing = json.loads(target.read_text()) if target.exists() else {}
    targets = existing.setdefault("targets", {})
    measured = commit()
    for name, tally in sorted(TALLIES.items()):
        targets[name] = {"examples": tally.examples, "rejected": tally.rejected, "commit": measured,
                         "slowest_s": round(tally.slowest_s, 4), "slowest_cpu_s": round(tally.slowest_cpu_s, 4)}
    existing["commit"] = measured
    existing["profile"] = os.environ.get("GOODPUT_FUZZ_PROFILE", "suite")
    target.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")


class Startable(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


S = TypeVar("S", bound=Startable)


@contextmanager
def served_in_thread(server: S) -> Iterator[S]:
    """A real server in its own thread and event loop, for a module's examples to share: hypothesis
    runs each example synchronously, so the server cannot live in the test's own loop."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(30), "the server did not start"
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
