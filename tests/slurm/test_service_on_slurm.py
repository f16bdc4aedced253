"""goodput's service on the live lab: the watchers see a real job's Xid line, and the recovery
workflow drains, requeues and verifies a real job through the CLI backend."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.detect.watch import WatchClusterInput
from goodput.models import AnomalyKind, IncidentKey, Mode
from goodput.ownership import owning_incident
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject, result
from tests.workflows.test_watchers import incident_appears
from workers.watch import start_cluster_watch
from workers.worker import build_worker
from workflows.watch import cluster_watch_id

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
TRAIN = """#!/bin/bash
#SBATCH --comment=goodput:opt-in
step=0
while true; do
  step=$((step + 1))
  echo "iteration $step/ 1000 | elapsed time per iteration (ms): 200.0"
  if [ "$step" = 8 ] && [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then echo "{xid}"; fi
  sleep 0.2
done
"""


def submit(lab: Lab, tmp_path: Path, *args: str) -> str:
    tmp_path.chmod(0o755)
    script = tmp_path / "train.sbatch"
    script.write_text(TRAIN.format(xid=XID))
    return lab.sbatch("--requeue", f"--output={tmp_path}/out-%j.log", f"--chdir={tmp_path}", *args, str(script))


async def test_xid_printed_by_a_slurm_job_opens_an_incident(lab: Lab, client: Client, task_queue: str,
                                                            tmp_path: Path) -> None:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    policy = Policy(mode=Mode.MONITOR, linger_s=0)
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
        await start_cluster_watch(client, task_queue, WatchClusterInput(
            cluster=cluster, poll_interval_s=0.3, log_poll_interval_s=0.1))
        job_id = submit(lab, tmp_path, "--nodes=1")
        job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                               timeout=20, what="job to run")
        out = tmp_path / f"out-{job_id}.log"
        await eventually(lambda: _text(out), lambda text: XID in text, timeout=30, what="the Xid line")
        printed = time.monotonic()
        await incident_appears(client, IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0))
        print(f"incident {time.monotonic() - printed:.2f}s after the Xid line was seen in the file")
        key = IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0)
        report = await result(client, key.workflow_id)
        await client.get_workflow_handle(cluster_watch_id(cluster)).terminate("test over")
    assert report.state is IncidentState.RECOMMENDED_ONLY
    lead = report.anomalies[0]
    assert "xid-79" in lead.signature_ids and lead.nodes == job.nodes
    # The job's log alone blames the node: by default it is excluded and marked suspect, not drained.
    assert report.plan is not None and report.plan.suspect_nodes == job.nodes
    assert report.plan.nodes_to_drain() == ()


async def test_autonomous_recovery_of_a_real_job(lab: Lab, client: Client, task_queue: str, tmp_path: Path) -> None:
    backend = SlurmCliBackend()
    policy = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                    verify_running_timeout_s=90)
    job_id = submit(lab, tmp_path, "--nodes=2")
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                           timeout=20, what="job to run")
    bad = job.nodes[-1]
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
        incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT, nodes=(bad,)),
                                policy, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert owning_incident(lab.node(bad)["Reason"]) == incident
    again = await backend.get_job(job_id)
    assert again.restart_count == 1 and again.state is JobState.RUNNING and bad not in again.nodes
    states = [e.state for e in report.timeline]
    assert states.index(IncidentState.ISOLATING) < states.index(IncidentState.VERIFYING)


async def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""
