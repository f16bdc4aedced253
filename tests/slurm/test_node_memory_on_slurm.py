"""The node memory on the live lab: two unrelated users' jobs fail ambiguously on node1, so node1
is drained with goodput's reason; a third job's ambiguous failure there is attributed to node1.

Real Slurm jobs of real unprivileged users (goodput-alice, goodput-mallory) and of root share
node1 and nothing else; each failure is an NCCL timeout that names no culprit, the kind one
incident alone cannot settle. Autonomous mode: goodput really drains and requeues.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.models import AnomalyKind, Category, Mode
from goodput.ownership import owning_incident
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject
from workers.client import TemporalIncidentService
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(600)]

SLEEP = "#!/bin/bash\nsleep 600\n"
# Resubmission, because the jobs pin their nodes: a requeued copy pinned to a drained node would
# wait for it forever; a resubmitted one drops the pin that names the excluded node.
POLICY = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, resume=ResumeStrategy.RESUBMIT, coalesce_window_s=0.2, linger_s=0,
                verify_poll_interval_s=0.5, verify_running_timeout_s=90)


def submit(lab: Lab, user: str | None, nodes: str) -> str:
    args = ("--comment=goodput:opt-in", "--requeue", "--nodes=2", f"--nodelist={nodes}", "--output=/dev/null")
    if user is None:
        return lab.sbatch(*args, "--wrap=sleep 600")
    return lab.sbatch_as(user, *args, script=SLEEP)


async def test_two_unrelated_ambiguous_failures_on_one_node_drain_it(lab: Lab, client: Client,
                                                                    task_queue: str) -> None:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    jobs = [submit(lab, "goodput-alice", "node1,node2"), submit(lab, "goodput-mallory", "node1,node3"),
            submit(lab, None, "node1,node4")]
    for job_id in jobs:
        await eventually(lambda j=job_id: backend.get_job(j), lambda j: j.state is JobState.RUNNING,
                         timeout=30, what=f"job {job_id} to run")
    reports = []
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=POLICY):
        for job_id in jobs:
            incident = await inject(client, task_queue, anomaly(
                job_id, kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT, cluster=cluster),
                POLICY, Mode.AUTONOMOUS)
            # a requeue waits out the lab's credential expiry before the job runs again
            handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident)
            reports.append(await asyncio.wait_for(handle.result(), timeout=240))
        standing = await TemporalIncidentService(client, task_queue).node_standing(cluster)
    alice, mallory, third = reports
    assert alice.attribution is not None and alice.attribution.culprit_nodes == ()
    assert mallory.attribution is not None and mallory.attribution.culprit_nodes == ("node1",)
    assert owning_incident(lab.node("node1")["Reason"]) == mallory.incident_id  # goodput's reason
    assert third.attribution is not None and third.attribution.culprit_nodes == ("node1",)
    assert "node memory" in third.attribution.explanation
    for node in ("node2", "node3", "node4"):
        assert "DRAIN" not in lab.node(node)["State"]
    suspects = [s.node for s in standing if s.suspect]
    assert suspects == ["node1"], standing
