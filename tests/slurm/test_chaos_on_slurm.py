"""Chaos on the lab: a worker SIGKILLed at each step of a real recovery, and the recovery still
happens exactly once in Slurm's own records.

Two real workers (tests/slurm/chaos_worker.py: the service's workflows and activities, the Slurm
CLI backend) share a task queue; one of them dies by SIGKILL at the armed step, before its effect
or right after it (before Temporal hears of it). The survivor takes the step over after the
activity's heartbeat timeout and the incident must still recover the real job: one drain of the
bad node, one requeue (or one resubmission), each counted in slurmctld's log, not in goodput's
own timeline. A killed worker is replaced before the next case. docs/reliability.md has the table.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.models import AnomalyKind, Category, Mode
from goodput.ownership import owning_incident
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.scheduler import JobInfo, JobState
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject

from .conftest import Lab, SlurmRecords
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
NCCL = ("[rank0]:[E1129 06:22:43.551920 41877 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=96022, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600083 milliseconds before timing out.")
TRAIN = """#!/bin/bash
#SBATCH --comment=goodput:opt-in
step=0
while true; do
  step=$((step + 1))
  echo "iteration $step/ 100000 | elapsed time per iteration (ms): 200.0"
  sleep 0.2
done
"""
POLICY = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                verify_running_timeout_s=120, in_job_follow_s=0)


@dataclass
class Workers:
    """Two chaos workers on one task queue; `arm` names the step the next case kills."""

    address: str
    task_queue: str
    home: Path
    procs: list[subprocess.Popen[bytes]]

    @property
    def arm(self) -> Path:
        return self.home / "arm"

    def spawn(self) -> None:
        log = (self.home / f"worker-{len(self.procs)}.log").open("ab")
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "tests.slurm.chaos_worker", self.address, self.task_queue, str(self.arm)],
            cwd=REPO, env={**os.environ}, stdout=log, stderr=subprocess.STDOUT))
        log.close()

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def killed(self) -> list[int]:
        return [p.returncode for p in self.procs if p.poll() == -signal.SIGKILL]

    def replace_the_dead(self) -> None:
        """Start replacements at once; the next case waits for them only if they are not up yet."""
        while len(self.alive()) < 2:
            self.spawn()

    async def two_alive(self) -> None:
        crashed = [p.returncode for p in self.procs if p.poll() not in (None, -signal.SIGKILL)]
        assert not crashed, f"a chaos worker exited on its own ({crashed}): see {self.home}/worker-*.log"
        self.replace_the_dead()
        await eventually(lambda: _ready(self), lambda n: n >= len(self.procs), timeout=60,
                         what="both chaos workers polling")


async def _ready(workers: Workers) -> int:
    return len(list(workers.home.glob("ready-*")))


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def workers(temporal_env: WorkflowEnvironment,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Workers]:
    pool = Workers(temporal_env.client.service_client.config.target_host, f"chaos-{uuid.uuid4().hex[:8]}",
                   tmp_path_factory.mktemp("chaos"), [])
    (pool.home / "resubmit.key").write_bytes(secrets.token_bytes(32))
    try:
        yield pool
    finally:
        for proc in pool.alive():
            proc.send_signal(signal.SIGINT)
        stubborn = []
        for proc in pool.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stubborn.append(proc.pid)
                proc.kill()
                proc.wait(timeout=10)  # reaped, so no Popen outlives its process
        if stubborn:
            print(f"chaos workers {stubborn} ignored SIGINT for 30 s (logs in {pool.home}); killed")


def submit(lab: Lab, tmp_path: Path, *args: str) -> str:
    tmp_path.chmod(0o755)
    script = tmp_path / "train.sbatch"
    script.write_text(TRAIN)
    return lab.sbatch("--requeue", f"--output={tmp_path}/out-%j.log", f"--chdir={tmp_path}", *args, str(script))


async def running(lab: Lab, tmp_path: Path, *, nodes: int) -> tuple[SlurmCliBackend, JobInfo]:
    """A fresh opted-in `--requeue` job, once Slurm runs it."""
    backend = SlurmCliBackend()
    job_id = submit(lab, tmp_path, f"--nodes={nodes}")
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                           timeout=30, what="job to run")
    return backend, job


async def recover(client: Client, workers: Workers, kill_at: str, fault: str, job_id: str, nodes: tuple[str, ...],
                  policy: Policy = POLICY) -> IncidentReport:
    """Arm the kill, inject the fault's anomaly, and wait for the incident's end."""
    await workers.two_alive()
    killed_before = len(workers.killed())
    workers.arm.write_text(kill_at)
    if fault == "xid":
        found = anomaly(job_id, kind=AnomalyKind.GPU_FAULT, nodes=nodes[-1:], evidence=(XID,))
    elif fault == "crash":
        found = anomaly(job_id, kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT, evidence=(NCCL,))
    else:
        found = anomaly(job_id, kind=AnomalyKind.HANG, nodes=(), category=Category.HANG,
                        evidence=("no progress for 300 s after step 42 (hang detector)",))
    incident = await inject(client, workers.task_queue, found, policy, Mode.AUTONOMOUS)
    handle = client.get_workflow_handle(incident, result_type=IncidentReport)
    report = await asyncio.wait_for(handle.result(), timeout=150)
    assert len(workers.killed()) == killed_before + 1, f"the worker was not killed at {kill_at}"
    assert not workers.arm.exists()
    workers.replace_the_dead()  # starts while this case's checks and the next job's start run
    return report


XID_STEPS = ["attribute:before", "reserve_drain:before", "isolate:before", "isolate:after",
             "find_checkpoint:before", "resume:before", "resume:after", "verify:before"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill_at", XID_STEPS)
async def test_xid_recovery_survives_a_worker_killed_at(kill_at: str, lab: Lab, client: Client, workers: Workers,
                                                        records: SlurmRecords, tmp_path: Path) -> None:
    backend, job = await running(lab, tmp_path, nodes=2)
    job_id = job.job_id
    bad = job.nodes[-1]
    report = await recover(client, workers, kill_at, "xid", job_id, job.nodes)
    assert report.state is IncidentState.RECOVERED, report.timeline
    [drain] = records.drains(bad)
    assert report.incident_id in drain and owning_incident(lab.node(bad)["Reason"]) == report.incident_id
    assert records.requeues(job_id) == 1 and records.submissions() == [job_id]
    again = await backend.get_job(job_id)
    assert again.restart_count == 1 and bad not in again.nodes


# A kill before a step starts is one mechanism whatever the step (that attempt never ran; the
# survivor runs it after the heartbeat timeout), proven at every step above. Crash and hang add what
# differs for them: a requeue without a drain, its retry after the effect, and verification.
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("fault", "kill_at"), [
    ("crash", "resume:after"), ("crash", "verify:before"), ("hang", "resume:after")])
async def test_restart_without_drain_survives_a_worker_killed_at(
        fault: str, kill_at: str, lab: Lab, client: Client, workers: Workers, records: SlurmRecords,
        tmp_path: Path) -> None:
    backend, job = await running(lab, tmp_path, nodes=1)
    job_id = job.job_id
    report = await recover(client, workers, kill_at, fault, job_id, job.nodes)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert all(records.drains(node) == [] for node in ("node1", "node2", "node3", "node4"))
    assert records.requeues(job_id) == 1 and records.submissions() == [job_id]
    assert (await backend.get_job(job_id)).restart_count == 1


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill_at", ["resume:before", "resume:after"])
async def test_resubmission_survives_a_worker_killed_at(kill_at: str, lab: Lab, client: Client, workers: Workers,
                                                        records: SlurmRecords, tmp_path: Path) -> None:
    backend, job = await running(lab, tmp_path, nodes=2)
    job_id = job.job_id
    bad = job.nodes[-1]
    policy = POLICY.model_copy(update={"resume": ResumeStrategy.RESUBMIT})
    report = await recover(client, workers, kill_at, "xid", job_id, job.nodes, policy)
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert len(records.drains(bad)) == 1
    [new_job] = [j for j in records.submissions() if j != job_id]
    assert report.resumed_job_id == new_job and records.requeues(job_id) == 0
    resumed = await backend.get_job(new_job)
    assert bad not in resumed.nodes
