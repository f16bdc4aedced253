"""On the lab: a shared fault's incidents reach slurmctld as one set of commands (issue #29).

Six opted-in jobs run on two nodes; a leaf-switch fault fails them all at once. The fault's
isolate (both nodes, one reason) and the six jobs' resumes run at the same moment through the
recovery activities and the real CLI backend, as one worker process runs them in a storm. Before
the coalescer that was 2 drains + 6 requeues = 8 commands; now the drains and the requeues must be
at most 3 commands, and slurmctld's own log must show each job requeued exactly once and both
nodes drained with the fault's reason: nothing lost, nothing twice.

The hostile case: a job's owner chooses its name, comment and output, never the ids in a list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult, LocalRunner
from activities.recovery import RecoveryActivities
from goodput.identifiers import InvalidIdentifierError
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import IsolateInput, ResumeInput, ResumeResult
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier

from .conftest import Lab, SlurmRecords
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]

TICK_S = 1.0
ACTS = ("requeue", "requeuehold", "release", "update", "hold")


class CountingRunner(LocalRunner):
    """The real runner; records every command that changes something in Slurm."""

    def __init__(self) -> None:
        super().__init__()
        self.acted: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if argv[0] == "scontrol" and argv[1] in ACTS:
            self.acted.append(tuple(argv))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


def _running(lab: Lab, jobs: Sequence[str]) -> bool:
    states = lab.run("squeue", "-h", "-j", ",".join(jobs), "-o", "%i %T").stdout.split("\n")
    return sum(line.endswith(" RUNNING") for line in states) == len(jobs)


async def _resume(activities: RecoveryActivities, job_id: str) -> ResumeResult:
    return await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id=f"inc-{job_id}", job_id=job_id, strategy=ResumeStrategy.REQUEUE))


async def test_a_shared_fault_is_one_drain_and_one_requeue_on_slurm(lab: Lab, records: SlurmRecords) -> None:
    jobs = [lab.sbatch("--comment=goodput:opt-in", "--requeue", "-n1", f"--nodelist={node}", "-o", "/dev/null",
                       "--wrap", "sleep 600") for node in ("node1", "node2") for _ in range(3)]
    await eventually(lambda: _running(lab, jobs), what="six jobs running on node1 and node2")
    runner = CountingRunner()
    # A one-second tick: on a shared two-core test host the six incidents' reads before their
    # requeues can spread wider than the shipped 50 ms between arrivals; the mechanism is the same.
    activities = RecoveryActivities(SlurmCliBackend(runner, coalesce_tick_s=TICK_S), RecordingNotifier(),
                                    LocalDrainGate())
    isolate = ActivityEnvironment().run(activities.isolate, IsolateInput(
        incident_id="fault-leaf7", nodes=("node1", "node2"), summary="leaf switch leaf7 down"))
    isolated, *resumed = await asyncio.gather(isolate, *(_resume(activities, j) for j in jobs))

    assert len(runner.acted) <= 3, runner.acted
    requeued = [j for argv in runner.acted if argv[1] == "requeue" for j in argv[2].split(",")]
    assert sorted(requeued) == sorted(jobs), runner.acted  # each job in exactly one command
    assert isolated.drained == ("node1", "node2")
    assert all(r.changed and "one of " in r.detail for r in resumed), [r.detail for r in resumed]
    # slurmctld's own record: each job requeued exactly once, both nodes drained with the reason
    await eventually(lambda: [records.requeues(j) for j in jobs], lambda n: n == [1] * 6,
                     what="one Requeuing line per job")
    assert [len(records.drains(n)) for n in ("node1", "node2")] == [1, 1]
    assert all(d.startswith("goodput:fault-leaf7") for n in ("node1", "node2") for d in records.drains(n))
    backend = SlurmCliBackend()
    # verify's capacity note reads the job's partition only, from sinfo's text (22.05's JSON ignores -p)
    scoped = {n.name: n.drained for n in await backend.list_nodes("debug")}
    assert scoped == {"node1": True, "node2": True, "node3": False, "node4": False}
    for job in jobs:  # nothing lost: every job queued again, restarted once
        info = await backend.get_job(job)
        assert info.state in (JobState.PENDING, JobState.REQUEUED, JobState.RUNNING) and info.restart_count == 1


async def test_no_job_controlled_bytes_choose_the_ids_of_a_list(lab: Lab, records: SlurmRecords) -> None:
    alice = lab.sbatch_as("goodput-alice", "-n1", "-o", "/dev/null", script="#!/bin/sh\nsleep 600\n")
    # mallory names alice's job everywhere she can: job name, comment, output
    hostile = f"{alice},{alice} JobId={alice}"
    mallory = [lab.sbatch_as("goodput-mallory", "--requeue", "-n1", f"--job-name={alice},{alice}",
                             f"--comment=goodput:opt-in {hostile}", "-o", "/dev/null",
                             script=f"#!/bin/sh\necho 'requeue {hostile}'\nsleep 600\n") for _ in range(2)]
    await eventually(lambda: _running(lab, [alice, *mallory]), what="alice's and mallory's jobs running")
    runner = CountingRunner()
    backend = SlurmCliBackend(runner, coalesce_tick_s=TICK_S)
    with pytest.raises(InvalidIdentifierError):
        await backend.requeue_job(f"{mallory[0]},{alice}")
    results = await asyncio.gather(*(backend.requeue_job(j) for j in mallory))
    assert all(r.changed for r in results)
    assert [(argv[1], sorted(argv[2].split(","))) for argv in runner.acted] == [("requeue", sorted(mallory))]
    await eventually(lambda: [records.requeues(j) for j in mallory], lambda n: n == [1, 1],
                     what="mallory's jobs requeued")
    assert records.requeues(alice) == 0 and records.actions_on(alice) == []
