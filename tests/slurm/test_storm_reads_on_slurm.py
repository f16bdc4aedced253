"""On the lab: a shared fault's incidents cost at most 3 Slurm commands each, reads included (#29).

Eight opted-in jobs fill node1 and node2; a leaf-switch fault fails them all at once. Its node
incident drains both nodes, and each job's incident runs its Slurm steps through the recovery
activities and the real CLI backend, concurrently, as one worker process runs a storm:
`attribute` (the job's record), `resume` (the requeue) and `verify` (polling every 2 s through the
lab's ~11 s requeue delay until the job runs again on node3 or node4). Every command goodput runs
is counted. Before batched reads that was about 12.75 per job incident (one `scontrol show job` per
poll per job, two in resume); now verify's polls of one tick and resume's state checks are one
`scontrol` each (asking for each job by its id on its standard input), and resume reuses
attribute's record of the job (one `scontrol show job` per job), so the fault's 9 incidents must
cost at most 3 commands each, and slurmctld's log must still show each job requeued exactly once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult, LocalRunner
from activities.recovery import RecoveryActivities
from goodput.models import Anomaly, AnomalyKind, AnomalySource, IncidentKey
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import AttributeInput, IsolateInput, ResumeInput, VerifyInput
from goodput.recover.policy import ResumeStrategy
from tests.fakes.notifier import RecordingNotifier

from .conftest import Lab, SlurmRecords
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

TICK_S = 1.0  # as test_storm_batch_on_slurm: a loaded two-core host spreads one tick's callers wider
JOBS = 8
NODE_INCIDENTS = 1


class CountingRunner(LocalRunner):
    """The real runner; records every Slurm command goodput runs."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.ran.append(tuple(argv))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


def _on(lab: Lab, jobs: Sequence[str], nodes: set[str]) -> bool:
    lines = lab.run("squeue", "-h", "-j", ",".join(jobs), "-o", "%i %T %N").stdout.split("\n")
    placed = [line.split() for line in lines if line.strip()]
    return len(placed) == len(jobs) and all(p[1] == "RUNNING" and p[2] in nodes for p in placed)


async def _incident(activities: RecoveryActivities, job_id: str) -> bool:
    env = ActivityEnvironment()
    key = IncidentKey(cluster="lab", job_id=job_id, job_attempt=0)
    now = datetime.now(UTC)
    crash = Anomaly(id=f"a{job_id}", source=AnomalySource.SCHEDULER, kind=AnomalyKind.NODE_FAILURE, cluster="lab",
                    job_id=job_id, observed_at=now, detected_at=now, evidence=["leaf switch leaf7 down"])
    attributed = await env.run(activities.attribute, AttributeInput(incident_id=f"inc-{job_id}", key=key,
                                                                    anomalies=(crash,)))
    assert attributed.job is not None
    # as the workflow hands it on: the attribute step's record, which the requeue reuses
    resumed = await env.run(activities.resume, ResumeInput(
        incident_id=f"inc-{job_id}", job_id=job_id, strategy=ResumeStrategy.REQUEUE,
        restart_count_before=attributed.job.restart_count, known=attributed.job, known_at=attributed.job_read_at))
    verified = await env.run(activities.verify, VerifyInput(
        job_id=job_id, restart_count_before=resumed.restart_count_before, timeout_s=90, poll_interval_s=2.0))
    return verified.ok


async def test_a_shared_faults_incidents_cost_at_most_three_slurm_commands_each(
        lab: Lab, records: SlurmRecords) -> None:
    jobs = [lab.sbatch("--comment=goodput:opt-in", "--requeue", "-n1", "-o", "/dev/null", "--wrap", "sleep 600")
            for _ in range(JOBS)]
    await eventually(lambda: _on(lab, jobs, {"node1", "node2"}), what="eight jobs running on node1 and node2")
    runner = CountingRunner()
    activities = RecoveryActivities(SlurmCliBackend(runner, coalesce_tick_s=TICK_S), RecordingNotifier(),
                                    LocalDrainGate())
    isolate = ActivityEnvironment().run(activities.isolate, IsolateInput(
        incident_id="fault-leaf7", nodes=("node1", "node2"), summary="leaf switch leaf7 down"))
    isolated, *verified = await asyncio.gather(isolate, *(_incident(activities, j) for j in jobs))

    kinds = Counter(" ".join(argv[:3]) for argv in runner.ran)
    per_incident = len(runner.ran) / (JOBS + NODE_INCIDENTS)
    print(f"\nSlurm commands: {len(runner.ran)} for {JOBS} job incidents and {NODE_INCIDENTS} node incident "
          f"= {per_incident:.2f} per incident; {dict(kinds)}")
    assert all(verified), verified
    assert isolated.drained == ("node1", "node2")
    assert per_incident <= 3, (per_incident, kinds)
    assert kinds["scontrol show job"] == JOBS, kinds  # attribute's record only; resume reuses it
    # nothing lost, nothing twice: each job requeued exactly once, and running again elsewhere
    await eventually(lambda: [records.requeues(j) for j in jobs], lambda n: n == [1] * JOBS,
                     what="one Requeuing line per job")
    assert _on(lab, jobs, {"node3", "node4"})


async def test_no_job_controlled_bytes_reach_a_batched_status_read(lab: Lab) -> None:
    alice = lab.sbatch_as("goodput-alice", "-n1", "-o", "/dev/null", script="#!/bin/sh\nsleep 600\n")
    await eventually(lambda: _on(lab, [alice], {"node1", "node2", "node3", "node4"}), what="alice's job running")
    # mallory writes alice's record, ended and restarted nine times, on a line of its own in her
    # comment, after a guess at a mark, and as her job's name and output
    real = lab.run("scontrol", "-o", "show", "job", alice).stdout.strip()
    forged = real.replace("JobState=RUNNING ", "JobState=COMPLETED ", 1).replace("Restarts=0 ", "Restarts=9 ", 1)
    forged = forged.split(" NumNodes=", 1)[0]  # its head, up to the node list: a comment holds 1,024 bytes
    guess = f"goodput-{'0' * 32}-1"
    mallory = lab.sbatch_as("goodput-mallory", "--requeue", "-n1", f"--job-name={guess}",
                            f"--comment=goodput:opt-in\n{guess}\n{forged}", "-o", "/dev/null",
                            script=f"#!/bin/sh\necho '{forged}'\nsleep 600\n")
    await eventually(lambda: _on(lab, [alice, mallory], {"node1", "node2", "node3", "node4"}),
                     what="alice's and mallory's jobs running")
    assert len(lab.run("scontrol", "-o", "show", "job", mallory).stdout.strip().splitlines()) == 3  # the attack is real
    runner = CountingRunner()
    backend = SlurmCliBackend(runner, coalesce_tick_s=TICK_S)
    theirs, hers = await asyncio.gather(backend.job_status(alice), backend.job_status(mallory))
    # one scontrol asked for both, one job at a time; alice's own answer was believed, mallory's
    # (three lines) was not, and hers alone was read again the trusted way
    assert runner.ran.count(("scontrol", "-o")) == 1 and not any(argv[0] == "squeue" and "-j" in argv
                                                                 for argv in runner.ran), runner.ran
    assert not any(argv[:3] == ("scontrol", "show", "job") and argv[-1] == alice for argv in runner.ran), runner.ran
    assert (theirs.job_id, theirs.state.value, theirs.restart_count) == (alice, "RUNNING", 0)
    assert (hers.job_id, hers.state.value, hers.restart_count) == (mallory, "RUNNING", 0)
