"""One fault, many jobs on the live lab: one slurmd killed under two running jobs is one node
incident with one isolation decision, and both jobs run again on the other nodes.

Two real one-node jobs share node3 (a CPU each, pinned there); goodput's cluster watcher sees
Slurm mark node3 NOT_RESPONDING under them and opens an incident per job; the two incidents link
to node3's node incident, one leads (breaker, drain, audit) and the other joins its decision;
each job is resubmitted excluding node3 (a requeued copy would keep its pin on node3 and wait for
it) and verified running elsewhere. Autonomous mode: goodput really drains and resubmits.

Whether goodput or Slurm is first decides what the drain finds: goodput usually acts while the
node is only NOT_RESPONDING (about 20 s after the kill) and drains it with its own reason; Slurm
marks it DOWN about 25 s later and keeps that reason. If Slurm already marked it DOWN ("Not
responding"), goodput does not overwrite a reason it did not set (goodput.ownership): the drain
is a no-op, the node incident records Slurm's DOWN as acknowledged (`already-out`), and Slurm's
own DOWN keeps jobs off the node until its slurmd registers again. Either way there is exactly
one isolation decision for the fault.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.audit import MemoryAuditLog
from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.detect.watch import WatchClusterInput
from goodput.models import IncidentKey, Mode
from goodput.ownership import owning_incident
from goodput.recover.audit import AuditAction
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_incident import Isolation, node_incident_id
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.helpers import wait_until
from tests.workflows.helpers import ACTS_ALONE
from tests.workflows.test_watchers import workflow_exists
from workers.client import TemporalIncidentService
from workers.watch import start_cluster_watch
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow
from workflows.watch import cluster_watch_id, job_watch_id

from .conftest import SCRIPTS, Lab, SlurmRecords
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(600)]

NODE = "node3"
POLICY = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, resume=ResumeStrategy.RESUBMIT, coalesce_window_s=0.5, linger_s=0,
                verify_poll_interval_s=0.5, verify_running_timeout_s=120)


def _slurmd_pid(lab: Lab, node: str) -> int | None:
    """The pid of the lab's slurmd for `node`, only if that process carries the lab's tag."""
    try:
        pid = int((lab.dir / f"slurmd-{node}.pid").read_text().strip())
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if f"SLURMLAB_TAG={lab.dir}".encode() in environ else None


def _responding(lab: Lab, node: str) -> bool:
    return _answers(lab.node(node))


def _answers(record: dict[str, str]) -> bool:
    state = record.get("State", "")
    return "NOT_RESPONDING" not in state and not state.startswith("DOWN")


@pytest.fixture
def kill_slurmd(lab: Lab) -> Iterator[Callable[[str], None]]:
    """Kills a node's slurmd; afterwards (also when the test fails) starts it again and waits until
    Slurm hears from the node, before `lab` cancels the jobs and resumes the drains."""
    killed: list[str] = []

    def kill(node: str) -> None:
        pid = _slurmd_pid(lab, node)
        assert pid is not None, f"no lab slurmd for {node}"
        killed.append(node)
        os.kill(pid, signal.SIGKILL)

    yield kill
    for node in killed:
        if _slurmd_pid(lab, node) is None:
            subprocess.run(["bash", "-c", f'. "{SCRIPTS}/env.sh" && slurmlab_start_slurmd {node}'],
                           env={**os.environ, "SLURMLAB_DIR": str(lab.dir)}, check=True, timeout=60,
                           capture_output=True)
        wait_until(functools.partial(lab.node, node), _answers, timeout=90, interval=0.5,
                   what=f"{node} to come back")


def submit(lab: Lab) -> str:
    # --no-requeue: Slurm must not requeue the job itself when the node fails (JobRequeue=0
    # already; the pin to node3 would keep a requeued job waiting for node3 anyway).
    return lab.sbatch("--comment=goodput:opt-in", "--no-requeue", "--nodes=1", "--ntasks=1", "--cpus-per-task=1",
                      f"--nodelist={NODE}", "--output=/dev/null", "--wrap=sleep 600")


async def test_one_slurmd_killed_under_two_jobs_is_one_node_incident(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str,
        kill_slurmd: Callable[[str], None]) -> None:
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    jobs = [submit(lab), submit(lab)]
    for job_id in jobs:
        await eventually(lambda j=job_id: backend.get_job(j),  # type: ignore[misc]
                         lambda j: j.state is JobState.RUNNING and j.nodes == (NODE,), timeout=30,
                         what=f"job {job_id} to run on {NODE}")
    log = MemoryAuditLog()
    service = TemporalIncidentService(client, task_queue)
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=POLICY, audit_log=log):
        await start_cluster_watch(client, task_queue, WatchClusterInput(
            cluster=cluster, poll_interval_s=0.5, log_poll_interval_s=0.5))
        for job_id in jobs:  # the watcher's first scan (its baseline) is done: it launched their log watchers
            await workflow_exists(client, job_watch_id(cluster, job_id, 0), timeout_s=30)
        kill_slurmd(NODE)
        ids = [IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0).workflow_id for job_id in jobs]
        for incident in ids:  # Slurm notices after its SlurmdTimeout (20 s): generous waits
            await workflow_exists(client, incident, timeout_s=120)
        reports = [await asyncio.wait_for(client.get_workflow_handle_for(RecoveryWorkflow.run, i).result(),
                                          timeout=240) for i in ids]
        faults = await service.node_incidents(cluster)
        await client.get_workflow_handle(cluster_watch_id(cluster)).terminate("test over")
    assert [r.state for r in reports] == [IncidentState.RECOVERED] * 2, [r.timeline for r in reports]
    for report in reports:
        assert report.resumed_job_id is not None and report.resumed_job_id not in jobs
        copy = await backend.get_job(report.resumed_job_id)
        assert copy.state is JobState.RUNNING and copy.nodes and NODE not in copy.nodes, copy
    # exactly one node incident, linking both jobs, with one isolation decision
    nid = node_incident_id(cluster, NODE)
    assert [f.incident_id for f in faults] == [nid]
    [fault] = faults
    assert fault.linked == 2 and {link.incident_id for link in fault.links} == set(ids)
    assert [r.node_incidents for r in reports] == [(nid,), (nid,)]
    decision = fault.decision
    assert decision is not None and decision.by in ids, fault
    # one drain in slurmctld's own log, or none where Slurm's DOWN was first (the audit records the
    # one decision either way)
    drains = records.drains(NODE)
    assert len(drains) == (1 if decision.outcome is Isolation.DRAINED else 0), drains
    assert all(owning_incident(d) == decision.by for d in drains), drains
    assert len([r for r in log.read() if r.action is AuditAction.DRAIN]) == 1
    joiner = next(r for r in reports if r.incident_id != decision.by)
    assert any(decision.by in e.detail and "fault shared with 1 other job" in e.detail for e in joiner.timeline)
    reason = lab.node(NODE).get("Reason", "")
    if decision.outcome is Isolation.DRAINED:
        assert owning_incident(reason) == decision.by, reason  # goodput's drain, Slurm kept its reason
    else:  # Slurm was first: its DOWN acknowledged, its reason left alone
        assert decision.outcome is Isolation.ALREADY and "Not responding" in reason, (decision, reason)
    print(f"node incident {nid}: {decision.outcome} by {decision.by} ({decision.detail}); node reason {reason!r}")
