"""A signalled latency benchmark takes its lab, agents and goodput processes down: the signal cancels
the run, so every context manager's teardown (service.stop, the dev server, the lab's down.sh) runs."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from benchmarks.latency import until_signalled

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_cancels_the_run_and_its_teardown_runs(signum: int) -> None:
    torn_down: list[str] = []
    ready = asyncio.Event()

    async def benchmark() -> str:
        try:
            ready.set()
            await asyncio.Event().wait()  # a run that would go on for an hour
            return "finished"
        finally:
            torn_down.append("lab down")

    async def main() -> None:
        run = asyncio.create_task(until_signalled(benchmark()))
        await ready.wait()
        os.kill(os.getpid(), signum)
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())
    assert torn_down == ["lab down"]
    # the handlers are gone with the run: the process's own handling is back
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_second_signal_does_not_interrupt_the_teardown() -> None:
    steps: list[str] = []
    ready, tearing = asyncio.Event(), asyncio.Event()

    async def benchmark() -> None:
        try:
            ready.set()
            await asyncio.Event().wait()
        finally:
            tearing.set()
            await asyncio.sleep(0.2)  # down.sh, service.stop: awaited, and must not be cut short
            steps.append("torn down")

    async def main() -> None:
        run = asyncio.create_task(until_signalled(benchmark()))
        await ready.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        await tearing.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(main())
    assert steps == ["torn down"]
