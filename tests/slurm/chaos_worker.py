"""A real goodput worker on the lab that SIGKILLs itself at one armed step of a recovery.

`python -m tests.slurm.chaos_worker ADDRESS TASK_QUEUE ARM_FILE` runs `workers.worker.build_worker`
(the service's own workflows and activities, the Slurm CLI backend) with one extra activity
interceptor. ARM_FILE, when it exists, names a step and a moment, `isolate:after` say. The first
worker process to reach that moment claims the file (an atomic rename, so of two workers exactly
one dies) and kills itself with SIGKILL: no cleanup, no completion sent, as when a head node
loses power. `before` dies as the activity starts, before any effect; `after` dies once the
activity's effect is done in Slurm but before Temporal hears of it, the moment that tests
idempotency. The chaos tests (test_chaos_on_slurm.py) run two of these on one task queue,
holding one resubmission key as a deployment's workers do.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio import client as temporal_client
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.slurm.resubmit import ResubmitKey
from tests.fakes.notifier import RecordingNotifier
from workers.worker import build_worker


class KillAt(temporal_client.Interceptor, Interceptor):
    """A client interceptor that is also a worker one: workers built on the client use it."""

    def __init__(self, arm: Path) -> None:
        self._arm = arm

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self._arm)


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, arm: Path) -> None:
        super().__init__(next)
        self._arm = arm

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        step = activity.info().activity_type
        self._die_if_armed(step, "before")
        result = await super().execute_activity(input)
        self._die_if_armed(step, "after")
        return result

    def _die_if_armed(self, step: str, moment: str) -> None:
        try:
            armed = self._arm.read_text().strip()
        except FileNotFoundError:
            return
        if armed != f"{step}:{moment}":
            return
        try:  # of two workers at the same moment, the one whose rename succeeds dies
            os.rename(self._arm, self._arm.with_name(f"{self._arm.name}.fired-by-{os.getpid()}"))
        except FileNotFoundError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


async def main(address: str, task_queue: str, arm: Path) -> None:
    client = await Client.connect(address, data_converter=pydantic_data_converter, interceptors=[KillAt(arm)])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # One deployment, one resubmission secret (as <data_dir>/resubmit.key is): a retry on the
    # other worker must recognise the copy the dead one made.
    key = ResubmitKey((arm.parent / "resubmit.key").read_bytes())
    async with build_worker(client, task_queue, SlurmCliBackend(resubmit_key=key), RecordingNotifier()):
        (arm.parent / f"ready-{os.getpid()}").touch()
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
