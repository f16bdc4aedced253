"""The Temporal server killed with SIGKILL in the middle of a recovery and started again on its
database: the incident finishes, with exactly one drain and one requeue.

The embedded default of `goodput up` is the Temporal dev server on a SQLite file
(`workers.devserver.start`, the same call). A real `goodput worker` process runs the recovery on a
file-backed fake cluster whose drain records its effect and then stalls, so the server dies while
the drain activity is in flight. The worker reconnects by itself; the server, back on the same
database, still knows the activity, so the late completion is accepted (had the outage outlasted
the heartbeat timeout, the retry would find the node already drained: tests/slurm/test_chaos_on_slurm.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from goodput.demo.scheduler import FakeScheduler
from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from tests.helpers import eventually, free_port
from tests.workflows.helpers import FAST, anomaly, inject, result
from tests.workflows.test_durability import start_worker
from workers import devserver
from workers.client import connect
from workers.readiness import connect_when_ready

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


async def ready(address: str) -> Client:
    """A client once the server serves: one that has just opened its port may still answer
    "Frontend is not healthy yet" (a CI run failed on it)."""
    return await connect_when_ready(lambda: connect(address), namespace="default", what=address,
                                    say=lambda _: None, timeout_s=60)


@pytest.mark.timeout(180)
async def test_a_server_killed_mid_recovery_and_restarted_on_its_database_finishes_the_incident(
        tmp_path: Path) -> None:
    port, db, log = free_port(), tmp_path / "temporal.db", tmp_path / "temporal.log"
    server = devserver.start(port=port, ui_port=None, db_file=db, log_file=log)
    address = f"127.0.0.1:{port}"
    task_queue = f"crash-{uuid.uuid4().hex[:8]}"
    fake = FakeScheduler(state_path=tmp_path / "fake-cluster.json")
    worker: subprocess.Popen[bytes] | None = None
    try:
        worker = start_worker(address, task_queue, tmp_path, delay_s=8.0)
        incident = await inject(await ready(address), task_queue, anomaly(), FAST, Mode.AUTONOMOUS)
        await eventually(lambda: fake.journal("drain"), timeout=60, interval=0.05, what="the drain")
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
        server = devserver.start(port=port, ui_port=None, db_file=db, log_file=log)
        report = await result(await ready(address), incident)
        assert worker.poll() is None, "the worker exited instead of reconnecting"
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGINT)
            worker.wait(timeout=20)
        devserver.stop(server)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert [e.target for e in fake.journal("drain")] == ["node2"]
    assert [e.target for e in fake.journal("requeue")] == ["1001"]
