"""A worker SIGKILLed in the middle of the isolate step: the incident still completes, once.

The worker runs as a real `goodput worker` process on a file-backed fake cluster whose drain
records its effect and then stalls, so the kill lands after the effect and before the activity
completes — the worst moment. A second worker process picks the step up after the heartbeat
timeout; idempotency must leave exactly one drain and one requeue in the journal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from goodput.demo.scheduler import FakeScheduler
from goodput.models import Mode
from goodput.recover.lifecycle import IncidentState
from tests.helpers import eventually
from tests.workflows.helpers import FAST, anomaly, inject, result

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


def start_worker(address: str, task_queue: str, data_dir: Path, delay_s: float, *,
                 extra_env: dict[str, str] | None = None, tag: str = "") -> subprocess.Popen[bytes]:
    env = {**os.environ, "GOODPUT_DATA_DIR": str(data_dir), "GOODPUT_FAKE_ACTION_DELAY_S": str(delay_s),
           "GOODPUT_CONFIG": str(data_dir / "none.toml"), **(extra_env or {})}
    with (data_dir / f"worker-{delay_s}{tag}.log").open("ab") as log:
        return subprocess.Popen([sys.executable, "-c", "from workers.main import main; main()",
                                 "--temporal", address, "worker", "--task-queue", task_queue],
                                env=env, stdout=log, stderr=subprocess.STDOUT)


async def test_sigkill_mid_isolate_completes_with_one_drain_and_one_requeue(
        client: Client, temporal_address: str, task_queue: str, tmp_path: Path) -> None:
    fake = FakeScheduler(state_path=tmp_path / "fake-cluster.json")
    first = start_worker(temporal_address, task_queue, tmp_path, delay_s=30.0)
    second: subprocess.Popen[bytes] | None = None
    try:
        incident = await inject(client, task_queue, anomaly(), FAST, Mode.AUTONOMOUS)
        await eventually(lambda: fake.journal("drain"), timeout=30, interval=0.05, what="the drain")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        second = start_worker(temporal_address, task_queue, tmp_path, delay_s=0.0)
        report = await result(client, incident)
    finally:
        for proc in (first, second):
            if proc and proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=15)
    assert report.state is IncidentState.RECOVERED
    assert [e.target for e in fake.journal("drain")] == ["node2"]
    assert [e.target for e in fake.journal("requeue")] == ["1001"]
    assert any("already drained" in line for line in report.actions_done)
