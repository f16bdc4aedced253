"""Coexistence with jobs that restart themselves: a submitit job requeues itself on a preemption
notice (its own SIGUSR2 handler calls `scontrol requeue`), so goodput must not restart it a
second time, whatever its resume strategy. The real submitit package submits the job to the lab.

The incident opens from an Xid the job prints and waits for approval (approve mode); meanwhile
Slurm signals the job and submitit requeues it. The operator then approves: goodput drains the
node it blames, sees the job already restarted, leaves it alone and verifies it running again.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.detect.watch import WatchClusterInput
from goodput.models import Category, IncidentKey, Mode, OperatorDecision
from goodput.ownership import owning_incident
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import ResumeStrategy
from tests.fakes.notifier import RecordingNotifier
from tests.required import require_module
from tests.workflows.helpers import result, wait_for_state
from tests.workflows.test_watchers import incident_appears
from workers.client import TemporalIncidentService
from workers.watch import start_cluster_watch
from workers.worker import build_worker
from workflows.watch import cluster_watch_id

from .conftest import Lab
from .harness import eventually
from .test_training_e2e import policy

submitit = require_module("submitit", "the e2e extra: pip install -e '.[e2e]'")
pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("strategy", [ResumeStrategy.RESUBMIT, ResumeStrategy.REQUEUE])
async def test_a_job_that_requeues_itself_is_not_restarted_a_second_time(
        lab: Lab, client: Client, task_queue: str, tmp_path: Path, strategy: ResumeStrategy) -> None:
    from tests.slurm.submitit_job import Trainer

    tmp_path.chmod(0o755)
    cluster = f"sub{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    rules = policy(resume=strategy, mode=Mode.APPROVE)
    executor = submitit.SlurmExecutor(folder=tmp_path / "submitit")
    executor.update_parameters(time=30, nodes=1, ntasks_per_node=1, comment="goodput:opt-in",
                               setup=[f"export PYTHONPATH={REPO}"], additional_parameters={"requeue": True})
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=rules):
        await start_cluster_watch(client, task_queue, WatchClusterInput(
            cluster=cluster, poll_interval_s=0.5, log_poll_interval_s=0.1))
        try:
            job = executor.submit(Trainer(), 3000, 15)
            key = IncidentKey(cluster=cluster, job_id=job.job_id, job_attempt=0)
            await incident_appears(client, key, timeout_s=90)
            waiting = await wait_for_state(client, key.workflow_id, IncidentState.AWAITING_APPROVAL)
            assert waiting.attribution is not None and waiting.attribution.category is Category.GPU_HARDWARE
            node = waiting.attribution.culprit_nodes[0]

            lab.run("scancel", "--signal=USR2", job.job_id)  # a preemption notice; submitit requeues
            again = await eventually(lambda: backend.get_job(job.job_id),
                                     lambda j: j.restart_count == 1 and j.state.value == "RUNNING", timeout=60,
                                     what="submitit requeueing the job itself")
            await TemporalIncidentService(client, task_queue).decide(key.workflow_id, Decision(
                verb=DecisionVerb.APPROVE, by=OperatorDecision(who="olga", reason="xid 79 on the node")))
            report = await result(client, key.workflow_id)
            after = await backend.get_job(job.job_id)
            jobs = lab.run("squeue", "--noheader", "--format=%i").stdout.split()
        finally:
            await client.get_workflow_handle(cluster_watch_id(cluster)).terminate("scenario over")

    assert report.state is IncidentState.RECOVERED, report.timeline
    assert report.resumed_job_id == job.job_id  # the job's own restart, not a copy
    assert any("requeued" in d and "restarts=1" in d for d in report.actions_done), report.actions_done
    assert after.restart_count == again.restart_count == 1  # once, by submitit
    assert jobs == [job.job_id]  # no copy was submitted
    assert owning_incident(lab.node(node)["Reason"]) == report.incident_id  # the drain still happened
