"""On the lab, through the recovery workflow: a requeue away from a node goodput distrusts but did
not drain is requeue-held, excluded, then released, and the job never runs on that node again.

The hold is what is proven, not only the end state: the lab's requeue delay (cred_expire) keeps a
requeued job from starting for seconds anyway, so a plain requeue followed by the exclusion would
reach the same end here, and race a busy production scheduler. So the test reads the job back
from slurmctld at the moment ExcNodeList changes (it must be held then), and slurmctld's log must
show the exclusion set before the hold was released.

The node stays in service: the backend's drain of it is a no-op (what a drain refused, lost or
left to another owner looks like to the incident), so only the exclusion keeps the job off it,
and the job would go back there (Slurm fills the lowest idle node first) without it.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult, LocalRunner
from goodput.models import AnomalyKind, Mode
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.scheduler import ActionResult, JobState
from goodput.slurm.records import split_record
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow

from .conftest import Lab, SlurmRecords
from .harness import eventually
from .test_chaos_on_slurm import XID

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(240)]

POLICY = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, resume=ResumeStrategy.REQUEUE, coalesce_window_s=0.2, linger_s=0,
                verify_poll_interval_s=0.5, verify_running_timeout_s=120, in_job_follow_s=0)


class SeesTheExclusion(LocalRunner):
    """The real runner; right before ExcNodeList is changed it reads the job back from slurmctld."""

    def __init__(self) -> None:
        super().__init__()
        self.at_exclusion: list[dict[str, str]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if list(argv[:2]) == ["scontrol", "update"] and any(a.startswith("ExcNodeList=") for a in argv):
            job = argv[2].removeprefix("JobId=")
            shown = await super().run(["scontrol", "show", "job", "-o", job])
            self.at_exclusion.append(split_record(shown.stdout))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


class DistrustsWithoutDraining(SlurmCliBackend):
    async def drain_node(self, name: str, reason: str) -> ActionResult:
        return ActionResult(changed=False, detail=f"{name} left in service")


async def test_a_requeue_holds_the_job_while_it_excludes_a_distrusted_node_that_is_not_drained(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    runner = SeesTheExclusion()
    backend = DistrustsWithoutDraining(runner)
    job_id = lab.sbatch(f"--output={tmp_path}/out-%j.log", "--comment=goodput:opt-in", "--requeue",
                        "--wrap=sleep 300")
    first = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                             what="the job running")
    [suspect] = first.nodes
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=POLICY):
        incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT, nodes=(suspect,),
                                                            cluster=f"rx{uuid.uuid4().hex[:6]}", evidence=(XID,)),
                                POLICY, Mode.AUTONOMOUS)
        report = await asyncio.wait_for(client.get_workflow_handle_for(RecoveryWorkflow.run, incident).result(),
                                        timeout=180)
    again = await backend.get_job(job_id)

    assert report.state is IncidentState.RECOVERED, report.timeline
    assert again.restart_count == 1 and suspect not in again.nodes and suspect in again.excluded_nodes
    assert not again.held
    assert "DRAIN" not in lab.node(suspect)["State"] and records.drains(suspect) == []  # distrusted, not drained
    # Held while its ExcNodeList changed: Slurm's own view of the job at that moment.
    [seen] = runner.at_exclusion
    assert (seen["Priority"], seen["Reason"]) == ("0", "job_requeued_in_held_state"), seen
    # slurmctld's order: exclusion set, then the hold released, then (only then) started again.
    job = re.escape(job_id)
    names = [name for line in records.text().splitlines() for name, pattern in (
        ("excluded", rf"setting exc_nodes to {re.escape(suspect)} for JobId={job}\b"),
        ("released", rf"release hold on JobId={job}\b"), ("started", rf"(?:Started|Allocate) JobId={job}\b"))
        if re.search(pattern, line)]
    after_first_run = names[names.index("excluded"):] if "excluded" in names else names
    assert after_first_run == ["excluded", "released", "started"], records.text()
