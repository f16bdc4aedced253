"""In-cluster (slurmrestd) mode: slurmrestd stops answering as an incident opens; the first steps
are retried while the incident says what it waits for, and once it answers again the recovery
completes with one drain and one requeue (slurmctld's own log). Built by `scheduler_from`, as the
worker builds it, with the CLI for what REST cannot do.

slurmrestd is frozen (SIGSTOP): its port still accepts connections and nothing answers, so every
request waits for the client's timeout (`slurm.command_timeout_s`, 8 s here), the slowest way a
server can be down, and each attempt fails with that timeout as its reason.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.config import Settings
from goodput.models import AnomalyKind, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject
from workers.client import TemporalIncidentService
from workers.worker import build_worker, scheduler_from

from .conftest import Lab, Restd, SlurmRecords, _lab_pid
from .harness import eventually
from .test_chaos_on_slurm import XID, submit

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]

OUTAGE_S = 30.0


@pytest.mark.timeout(300)
async def test_slurmrestd_down_as_an_incident_opens_delays_it_without_escalating(
        lab: Lab, records: SlurmRecords, slurmrestd: Restd, client: Client, task_queue: str,
        tmp_path: Path) -> None:
    restd = _lab_pid(lab, lab.dir / "slurmrestd.pid")
    assert restd is not None
    token = tmp_path / "jwt"
    token.write_text(slurmrestd.token)
    settings = Settings(scheduler="slurm-rest", resubmit_key="rest-outage-key-0123456789abcdef",
                        slurm={"rest_url": slurmrestd.url, "rest_user": slurmrestd.user, "rest_token_file": token,
                               "rest_allow_http": True,  # loopback
                               "command_timeout_s": 8})
    backend = scheduler_from(settings)
    assert isinstance(backend, SlurmRestBackend)
    policy = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                    verify_running_timeout_s=120, in_job_follow_s=0)
    service = TemporalIncidentService(client, task_queue)
    seen: list[IncidentReport] = []
    try:
        job_id = submit(lab, tmp_path, "--nodes=2")
        job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                               timeout=30, what="job to run")
        async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
            os.kill(restd, signal.SIGSTOP)
            frozen = time.monotonic()
            try:
                incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT,
                                                                    nodes=job.nodes[-1:], evidence=(XID,)),
                                        policy, Mode.AUTONOMOUS)
                while time.monotonic() - frozen < OUTAGE_S:
                    seen.append(await service.get(incident))
                    await asyncio.sleep(2)
            finally:
                os.kill(restd, signal.SIGCONT)
            handle = client.get_workflow_handle(incident, result_type=IncidentReport)
            report = await asyncio.wait_for(handle.result(), timeout=180)
        again = await backend.get_job(job_id)
    finally:
        os.kill(restd, signal.SIGCONT)
        await backend.aclose()
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert all(r.state is not IncidentState.ESCALATED for r in seen)
    # Under `fewer-steps` the outage meets `attribute`, a local activity, which Temporal does not list
    # as pending: the workflow retries it itself and the incident says so (`local-step-retries`).
    retried = [w for r in seen for w in r.waiting if w.attempt >= 2 and w.last_failure]
    assert any(w.step == "attribute" for w in retried), [r.waiting for r in seen]
    assert all("Heartbeat" not in w.last_failure for w in retried)  # the cause, not a symptom
    print("waiting for:", retried[-1].describe())
    assert len(records.drains(job.nodes[-1])) == 1
    assert records.requeues(job_id) == 1
    assert again.restart_count == 1 and job.nodes[-1] not in again.nodes
