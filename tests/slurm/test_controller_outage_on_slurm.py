"""slurmctld stopped for 60 s just as a recovery requeues the job: the step is retried with backoff,
the incident says what it is waiting for meanwhile, nothing escalates, and once the controller is
back the job is requeued exactly once (counted in slurmctld's own log).

The controller is frozen with SIGSTOP, a process stopped in the literal sense: its port still
accepts connections, so every `scontrol` waits for its MessageTimeout and fails, the worst kind of
outage for a client (a refused connection would fail at once). The freeze is set off by the test's
backend the first time the recovery asks to requeue, so it lands on that step and no other.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.models import AnomalyKind, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.scheduler import ActionResult, JobInfo, JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject
from workers.client import TemporalIncidentService
from workers.worker import build_worker

from .conftest import Lab, SlurmRecords
from .harness import eventually
from .test_chaos_on_slurm import XID, submit

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]

OUTAGE_S = 60.0


class FreezesTheController(SlurmCliBackend):
    """The Slurm CLI backend, with the controller stopped as the first requeue is asked for."""

    def __init__(self, controller_pid: int) -> None:
        super().__init__()
        self._pid = controller_pid
        self.frozen_at: float | None = None

    async def requeue_job(self, job_id: str, *, hold: bool = False, known: JobInfo | None = None,
                          fresh: bool = False) -> ActionResult:
        if self.frozen_at is None:
            os.kill(self._pid, signal.SIGSTOP)
            self.frozen_at = time.monotonic()
        return await super().requeue_job(job_id, hold=hold, known=known, fresh=fresh)


def controller_pid(lab: Lab) -> int:
    return int((lab.dir / "slurmctld.pid").read_text().split()[0])


@pytest.mark.timeout(300)
async def test_a_controller_stopped_for_a_minute_during_requeue_delays_the_recovery_without_escalating(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str, tmp_path: Path) -> None:
    pid = controller_pid(lab)
    backend = FreezesTheController(pid)
    job_id = submit(lab, tmp_path, "--nodes=2")
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                           timeout=30, what="job to run")
    policy = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                    verify_running_timeout_s=120, in_job_follow_s=0)
    service = TemporalIncidentService(client, task_queue)
    seen: list[IncidentReport] = []
    try:
        async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
            incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT,
                                                                nodes=job.nodes[-1:], evidence=(XID,)),
                                    policy, Mode.AUTONOMOUS)
            await eventually(lambda: _frozen(backend), bool, timeout=60, what="the requeue to freeze slurmctld")
            # While the controller is stopped: the incident names the step it retries and why.
            while backend.frozen_at is not None and time.monotonic() - backend.frozen_at < OUTAGE_S:
                seen.append(await service.get(incident))
                await asyncio.sleep(2)
            os.kill(pid, signal.SIGCONT)
            report = await asyncio.wait_for(_result(service, incident), timeout=150)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert all(r.state is not IncidentState.ESCALATED for r in seen)
    retried = [w for r in seen for w in r.waiting if w.step == "resume" and w.attempt >= 2 and w.last_failure]
    assert retried, [r.waiting for r in seen]
    print("waiting for:", retried[-1].describe())
    assert "scontrol" in retried[-1].last_failure or "slurm" in retried[-1].last_failure.lower()
    assert records.requeues(job_id) == 1
    again = await backend.get_job(job_id)
    assert again.restart_count == 1 and job.nodes[-1] not in again.nodes


async def _frozen(backend: FreezesTheController) -> bool:
    return backend.frozen_at is not None


async def _result(service: TemporalIncidentService, incident: str) -> IncidentReport:
    while True:
        report = await service.get(incident)
        if report.outcome is not None:
            return report
        await asyncio.sleep(1)
