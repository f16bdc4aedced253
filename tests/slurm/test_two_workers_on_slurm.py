"""Two goodput workers and two detectors on one real fault: one incident, one drain, one requeue.

Two real `goodput worker` processes (their own data directories, one task queue, as on two head
nodes) watch the lab. A one-node job prints an Xid line and exits 1, so the fault is seen twice:
by its log watcher (the Xid line) and by the scheduler watcher (Slurm's FAILED state). Both
detections name the same job attempt, so they meet in one incident (one workflow id), which acts
once: counted in slurmctld's own log, not in goodput's timeline.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from goodput.models import AnomalySource, IncidentKey
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from tests.workflows.test_durability import start_worker
from tests.workflows.test_watchers import incident_appears, workflow_exists
from workflows.watch import cluster_watch_id

from .conftest import Lab, SlurmRecords
from .test_chaos_on_slurm import XID

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]

FAILS_ONCE = """#!/bin/bash
#SBATCH --comment=goodput:opt-in
step=0
while true; do
  step=$((step + 1))
  echo "iteration $step/ 100000 | elapsed time per iteration (ms): 200.0"
  if [ "$step" = 25 ] && [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then echo "{xid}"; exit 1; fi
  sleep 0.2
done
"""


@pytest.mark.timeout(240)
async def test_two_workers_and_two_detectors_make_one_incident_that_acts_once(
        lab: Lab, records: SlurmRecords, client: Client, temporal_address: str, task_queue: str,
        tmp_path: Path) -> None:
    cluster = f"two{uuid.uuid4().hex[:6]}"
    env = {"SLURM_CONF": str(lab.conf), "GOODPUT_SCHEDULER": "slurm-cli", "GOODPUT_CLUSTER": cluster,
           "GOODPUT_SCHEDULER_POLL_S": "0.5", "GOODPUT_LOG_POLL_S": "0.1", "GOODPUT_RESUBMIT_KEY": uuid.uuid4().hex,
           "GOODPUT_POLICY__MODE": "autonomous", "GOODPUT_POLICY__LINGER_S": "0",
           "GOODPUT_POLICY__VERIFY_POLL_INTERVAL_S": "0.5", "GOODPUT_POLICY__IN_JOB_FOLLOW_S": "0",
           # the point is acting once: on the job's log alone, with no record at the site yet
           "GOODPUT_POLICY__AUTONOMY__EARNED": "false", "GOODPUT_POLICY__EXCLUDE_BEFORE_DRAIN__ENABLED": "false"}
    workers: list[subprocess.Popen[bytes]] = []
    for name in ("head1", "head2"):
        (tmp_path / name).mkdir()
        workers.append(start_worker(temporal_address, task_queue, tmp_path / name, 0.0, extra_env=env))
    try:
        # Both started (a worker starts its cluster's watch) before the job, so either may take any step.
        await workflow_exists(client, cluster_watch_id(cluster), timeout_s=60)
        await asyncio.sleep(3)
        tmp_path.chmod(0o755)
        script = tmp_path / "train.sbatch"
        script.write_text(FAILS_ONCE.format(xid=XID))
        job_id = lab.sbatch("--requeue", "--nodes=1", f"--output={tmp_path}/out-%j.log", f"--chdir={tmp_path}",
                            str(script))
        key = IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0)
        await incident_appears(client, key, timeout_s=60)
        handle = client.get_workflow_handle(key.workflow_id, result_type=IncidentReport)
        report = await asyncio.wait_for(handle.result(), timeout=150)
        assert all(w.poll() is None for w in workers), "a worker died"
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGINT)
        for worker in workers:
            worker.wait(timeout=30)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert {a.source for a in report.anomalies} >= {AnomalySource.LOG, AnomalySource.SCHEDULER}, report.anomalies
    incidents = [w.id async for w in client.list_workflows(
        f"WorkflowType = 'RecoveryWorkflow' AND GoodputCluster = '{cluster}'")]
    assert incidents == [key.workflow_id]
    [node] = report.job.nodes if report.job else ("?",)
    assert len(records.drains(node)) == 1
    assert records.requeues(job_id) == 1
