"""On the lab: a straggler named while its job runs pends the node's exclusion (#33).

In autonomous mode the running job is not requeued: Slurm's restart count stays 0 and the node
stays in service. When the job then fails (exit 3, the same job attempt), goodput requeues it and
slurmctld reports the straggler's node in the job's ExcNodeList, the job running elsewhere.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import LocalRunner
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Mode
from goodput.recover.corroboration import ExcludeBeforeDrainPolicy
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.recover.trust import AutonomyPolicy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import inject, wait_for_state
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow

from .conftest import Lab, SlurmRecords
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(240)]

POLICY = Policy(mode=Mode.AUTONOMOUS, resume=ResumeStrategy.REQUEUE, coalesce_window_s=0.2, linger_s=0,
                verify_poll_interval_s=0.5, verify_running_timeout_s=120, in_job_follow_s=0,
                exclude_before_drain=ExcludeBeforeDrainPolicy(enabled=True), autonomy=AutonomyPolicy(earned=False))


def _seen(cluster: str, job_id: str, kind: AnomalyKind, source: AnomalySource, nodes: tuple[str, ...],
          line: str, lost: float | None = None) -> Anomaly:
    now = datetime.now(UTC)
    return Anomaly(id=f"{kind}-{uuid.uuid4().hex[:8]}", source=source, kind=kind, cluster=cluster, job_id=job_id,
                   nodes=nodes, evidence=[line], observed_at=now, detected_at=now, lost_s_per_h=lost,
                   category=Category.STRAGGLER if kind is AnomalyKind.STRAGGLER else None)


async def test_a_straggler_is_excluded_at_the_jobs_next_requeue_not_before(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    backend = SlurmCliBackend(LocalRunner())
    cluster = f"stg{uuid.uuid4().hex[:6]}"
    fail = tmp_path / "fail"
    # Runs until told to fail, then exits 3 (FAILED); once requeued it runs again, waiting.
    job_id = lab.sbatch(f"--output={tmp_path}/out-%j.log", "--comment=goodput:opt-in", "--requeue", "--exclusive",
                        f"--wrap=while [ ! -e {fail} ]; do sleep 0.5; done; rm -f {fail}; exit 3")
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                           what=f"job {job_id} running")
    [node] = job.nodes
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=POLICY):
        slow = _seen(cluster, job_id, AnomalyKind.STRAGGLER, AnomalySource.LOG, (node,),
                     f"rank 1 on {node} takes 1.200 s per step against a fleet median of 1.000 s", 720.0)
        incident = await inject(client, task_queue, slow, POLICY, Mode.AUTONOMOUS)
        pending = await wait_for_state(client, incident, IncidentState.PENDING_EXCLUSION, timeout_s=60)
        still = await backend.get_job(job_id)
        assert still.state is JobState.RUNNING and still.restart_count == 0 and node not in still.excluded_nodes
        assert pending.plan is not None and pending.plan.pending_exclusion == (node,)

        fail.touch()
        await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.FAILED,
                         what=f"job {job_id} failed")
        ended = _seen(cluster, job_id, AnomalyKind.JOB_FAILED, AnomalySource.SCHEDULER, (),
                      f"slurm: job {job_id} FAILED exit=3")
        assert await inject(client, task_queue, ended, POLICY, Mode.AUTONOMOUS) == incident
        report = await asyncio.wait_for(client.get_workflow_handle_for(RecoveryWorkflow.run, incident).result(),
                                        timeout=180)
    again = await backend.get_job(job_id)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert again.restart_count == 1 and node in again.excluded_nodes and node not in again.nodes
    assert "DRAIN" not in lab.node(node)["State"] and records.drains(node) == []
