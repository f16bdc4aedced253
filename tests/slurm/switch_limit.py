"""The breaker's switch limit on the lab, as both its lab tests drive it.

Three exclusive jobs on three nodes under one switch; a GPU-fault incident for each in turn. The
first two drain their nodes, the third trips a limit of two drains per switch and waits for an
operator. The tests differ only in where the switch map comes from (configured, or Slurm's own
`scontrol show topology`) and in what they do with the waiting incident.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.models import AnomalyKind, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.scheduler import JobState
from tests.workflows.helpers import anomaly, inject, wait_for_state

from .conftest import Lab, SlurmRecords
from .harness import eventually
from .test_chaos_on_slurm import XID


async def running_job(backend: SlurmCliBackend, lab: Lab, tmp_path: Path) -> tuple[str, str]:
    """An opted-in, requeueable job alone on its node, running: its id and its node."""
    job_id = lab.sbatch(f"--output={tmp_path}/out-%j.log", "--comment=goodput:opt-in", "--requeue", "--exclusive",
                        "--wrap=sleep 300")
    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                           what=f"job {job_id} running")
    [node] = job.nodes
    return job_id, node


def node_state(lab: Lab, node: str) -> str:
    return lab.node(node)["State"]


async def drain_two_then_wait(lab: Lab, client: Client, task_queue: str, policy: Policy, cluster: str,
                              jobs: list[tuple[str, str]]) -> tuple[str, IncidentReport]:
    """Inside a running worker: the first two jobs' incidents drain their nodes; the third's waits
    for approval. Returns the third incident's id and its waiting report."""
    for job_id, node in jobs[:2]:
        await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT, nodes=(node,),
                                                 cluster=cluster, evidence=(XID,)), policy, Mode.AUTONOMOUS)
        await eventually(partial(node_state, lab, node), lambda s: "DRAIN" in s, what=f"{node} drained")
    job_id, node = jobs[2]
    incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT, nodes=(node,),
                                                        cluster=cluster, evidence=(XID,)), policy, Mode.AUTONOMOUS)
    return incident, await wait_for_state(client, incident, IncidentState.AWAITING_APPROVAL, timeout_s=60)


def assert_switch_held_the_third(lab: Lab, records: SlurmRecords, jobs: list[tuple[str, str]],
                                 waiting: IncidentReport, switch: str) -> None:
    (_, first), (_, second), (_, last) = jobs
    assert records.drains(first) != [] and records.drains(second) != []
    assert records.drains(last) == [] and "DRAIN" not in lab.node(last)["State"]
    said = waiting.timeline[-1].detail
    assert f"switch {switch} drain limit tripped" in said and "switch is the likelier culprit" in said, said
