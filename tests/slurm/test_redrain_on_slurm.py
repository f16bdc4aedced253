"""On the lab: a node goodput drained, put back into service by an operator, that fails again is
drained again, and slurmctld's own log shows both drains.

The defect this guards was found on the lab (tests/integration/test_node_incident_link.py tells
the story): the second job incident joined the node incident's old "drained" decision, so nothing
drained the node again and the next jobs landed on it. The node incident stays open across both
failures here (its window is minutes), which is what made the old decision look current.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.models import AnomalyKind, Mode
from goodput.ownership import owning_incident
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_incident import node_incident_id
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject
from workers.client import TemporalIncidentService
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow

from .conftest import Lab, SlurmRecords
from .harness import eventually
from .test_chaos_on_slurm import XID

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(300)]

NODE = "node2"
# Resubmission: the jobs pin NODE, and a requeued copy would keep the pin and wait for it.
POLICY = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, resume=ResumeStrategy.RESUBMIT, coalesce_window_s=0.2, linger_s=0,
                verify_poll_interval_s=0.5, verify_running_timeout_s=90, in_job_follow_s=0)


async def test_a_node_returned_to_service_that_fails_again_is_drained_again(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str) -> None:
    cluster = f"re{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()

    async def fails_on_node() -> IncidentReport:
        job_id = lab.sbatch("--comment=goodput:opt-in", "--requeue", "--nodes=1", f"--nodelist={NODE}",
                            "--output=/dev/null", "--wrap=sleep 600")
        await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING, timeout=30,
                         what=f"job {job_id} running on {NODE}")
        incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT, nodes=(NODE,),
                                                            cluster=cluster, evidence=(XID,)), POLICY, Mode.AUTONOMOUS)
        handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident)
        return await asyncio.wait_for(handle.result(), timeout=120)

    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=POLICY):
        first = await fails_on_node()
        assert first.state is IncidentState.RECOVERED, first.timeline
        assert owning_incident(lab.node(NODE)["Reason"]) == first.incident_id
        lab.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME")  # the operator puts it back
        await eventually(lambda: asyncio.to_thread(lab.node, NODE), lambda n: "DRAIN" not in n["State"],
                         timeout=30, what=f"{NODE} in service again")
        second = await fails_on_node()
        [fault] = await TemporalIncidentService(client, task_queue).node_incidents(cluster)

    assert second.state is IncidentState.RECOVERED, second.timeline
    # Both failures linked to one node incident, and each took a decision of its own.
    assert fault.incident_id == node_incident_id(cluster, NODE) and fault.linked >= 1
    assert first.node_incidents == second.node_incidents == (fault.incident_id,)
    drains = records.drains(NODE)
    assert [owning_incident(d) for d in drains] == [first.incident_id, second.incident_id], records.text()
    assert owning_incident(lab.node(NODE)["Reason"]) == second.incident_id
