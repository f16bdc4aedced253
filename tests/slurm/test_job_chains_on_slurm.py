"""Job chains on the lab: a 3-job chain survives the resubmission of its first job (its successor
is re-pointed to the copy and the chain runs on after it), and when goodput stops a job for good
its queued successor is held, with the reason in the incident, instead of starting blindly.

What counts is the dependency as Slurm records it, read back with `scontrol show job` at the
moment it matters: after the re-point, and (for a first job still running when it is
resubmitted) just before the original is cancelled, for an `afterany` successor would start the
moment its original ends if it still waited on it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult, LocalRunner
from goodput.detect.watch import WatchClusterInput
from goodput.models import IncidentKey, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobState
from goodput.slurm.records import split_record
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import anomaly, inject, result
from tests.workflows.test_watchers import incident_appears
from workers.watch import start_cluster_watch
from workers.worker import build_worker
from workflows.watch import cluster_watch_id

from .conftest import Lab
from .harness import eventually, past_baseline
from .test_chaos_on_slurm import XID
from .test_training_e2e import policy

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]

# The first link: its first run meets an Xid on its node and dies; a later run (the copy) trains
# a little and ends well.
FIRST = """#!/bin/bash
for i in $(seq 1 40); do
  echo "iteration $i/ 40 | loss 1.0 | elapsed time per iteration (ms): 250.0"
  if [ "$i" = 6 ] && [ ! -e {marker} ]; then
    touch {marker}
    xid="NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, GPU has fallen off the bus."
    echo "$(date '+%b %d %H:%M:%S') $SLURMD_NODENAME kernel: $xid"
    exit 1
  fi
  sleep 0.25
done
"""
# A link that crashes with an application error and then hangs (a rank died, its peers wait).
CRASHING = """#!/bin/bash
echo "iteration 1/ 40 | loss 1.0 | elapsed time per iteration (ms): 250.0"
sleep 2
echo 'Traceback (most recent call last):'
echo '  File "train.py", line 12, in <module>'
echo "KeyError: 'input_ids'"
sleep 300
"""
# A first link still running when goodput resubmits it; the copy (the marker is there) ends well.
STILL_RUNNING = """#!/bin/bash
if [ -e {marker} ]; then sleep 6; exit 0; fi
touch {marker}
sleep 300
"""
LINK = """#!/bin/bash
echo "$SLURM_JOB_ID ran" > {out}/ran-{name}
sleep 1
"""


class ReadsBackDependencies(LocalRunner):
    """The real runner; it reads back from slurmctld the dependency of each job whose dependency it
    changes (right after), and of `watch` right before it cancels any job."""

    def __init__(self, watch: Sequence[str] = ()) -> None:
        super().__init__()
        self.watch = tuple(watch)
        self.after_update: dict[str, str] = {}
        self.before_cancel: dict[str, str] = {}

    async def dependency(self, job_id: str) -> str:
        return split_record((await super().run(["scontrol", "show", "job", "-o", job_id])).stdout)["Dependency"]

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if argv[0] == "scancel":
            for job_id in self.watch:
                self.before_cancel[job_id] = await self.dependency(job_id)
        done = await super().run(argv, stdin=stdin, timeout_s=timeout_s)
        if list(argv[:2]) == ["scontrol", "update"] and any(a.startswith("Dependency=") for a in argv):
            job_id = argv[2].removeprefix("JobId=")
            self.after_update[job_id] = await self.dependency(job_id)
        return done


class Chain:
    def __init__(self, lab: Lab, tmp_path: Path) -> None:
        tmp_path.chmod(0o755)
        self.lab, self.tmp = lab, tmp_path
        self.cluster = f"ch{uuid.uuid4().hex[:6]}"

    def submit(self, name: str, script: str, *extra: str) -> str:
        path = self.tmp / f"{name}.sbatch"
        path.write_text(script.format(marker=self.tmp / "faulted", out=self.tmp, name=name))
        return self.lab.sbatch(f"--output={self.tmp}/out-%j.log", f"--chdir={self.tmp}", "--comment=goodput:opt-in",
                               "--requeue", *extra, str(path))

    async def incident(self, client: Client, task_queue: str, backend: SlurmCliBackend, strategy: ResumeStrategy,
                       queue: Callable[[], list[str]]) -> tuple[list[str], IncidentReport]:
        """Queues the chain once the watcher runs (a job that fails before its first scan is
        history to it), then waits for the first job's incident to end."""
        async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy(resume=strategy)):
            await start_cluster_watch(client, task_queue, WatchClusterInput(
                cluster=self.cluster, poll_interval_s=0.5, log_poll_interval_s=0.1))
            try:
                await past_baseline(self.lab, client, self.cluster)
                ids = queue()
                key = IncidentKey(cluster=self.cluster, job_id=ids[0], job_attempt=0)
                await incident_appears(client, key, timeout_s=60)
                return ids, await result(client, key.workflow_id)
            finally:
                await client.get_workflow_handle(cluster_watch_id(self.cluster)).terminate("scenario over")


async def test_a_chain_survives_the_resubmission_of_its_first_job(lab: Lab, client: Client, task_queue: str,
                                                                  tmp_path: Path) -> None:
    chain = Chain(lab, tmp_path)
    runner = ReadsBackDependencies()
    backend = SlurmCliBackend(runner)

    def queue() -> list[str]:
        first = chain.submit("first", FIRST)
        second = chain.submit("second", LINK, f"--dependency=afterok:{first}")
        return [first, second, chain.submit("third", LINK, f"--dependency=afterok:{second}")]

    (first, second, third), report = await chain.incident(client, task_queue, backend, ResumeStrategy.RESUBMIT,
                                                           queue)

    assert report.state is IncidentState.RECOVERED, report.timeline
    copy = report.resumed_job_id
    assert copy and copy != first
    assert any(f"re-pointed successor(s) to {copy}: {second}" in d for d in report.actions_done), report.actions_done
    # Slurm's own record of the successor after the change: it waits on the copy, and only it
    assert re.fullmatch(rf"afterok:{copy}(_\*)?\(unfulfilled\)", runner.after_update[second]), runner.after_update
    assert list(runner.after_update) == [second]  # the third still waits on the second, untouched
    ran = await eventually(lambda: _ran(tmp_path), lambda r: {"second", "third"} <= r.keys(), timeout=90,
                           what="the rest of the chain running after the copy")
    assert ran["second"] == second and ran["third"] == third


async def test_an_afterany_successor_is_repointed_before_a_running_original_is_cancelled(
        lab: Lab, client: Client, task_queue: str, tmp_path: Path) -> None:
    chain = Chain(lab, tmp_path)
    policy_ = policy(resume=ResumeStrategy.RESUBMIT)
    first = chain.submit("first", STILL_RUNNING)
    second = chain.submit("second", LINK, f"--dependency=afterany:{first}")
    runner = ReadsBackDependencies(watch=(second,))
    backend = SlurmCliBackend(runner)
    job = await eventually(lambda: backend.get_job(first), lambda j: j.state is JobState.RUNNING, timeout=30,
                           what="the first link running")
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy_):
        incident = await inject(client, task_queue, anomaly(first, nodes=job.nodes[:1], cluster=chain.cluster,
                                                            evidence=(XID,)), policy_, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is IncidentState.RECOVERED, report.timeline
    copy = report.resumed_job_id
    assert copy and copy != first
    # When the original was cancelled, Slurm already had the successor waiting on the copy.
    assert re.fullmatch(rf"afterany:{copy}(_\*)?\(unfulfilled\)", runner.before_cancel[second]), runner.before_cancel
    ran = await eventually(lambda: _ran(tmp_path), lambda r: "second" in r, timeout=60,
                           what="the successor running after the copy")
    assert ran["second"] == second
    # …so it started after the copy ended, not when the original was cancelled
    started, copy_ended = _time(lab, second, "StartTime"), _time(lab, copy, "EndTime")
    assert started >= copy_ended, (started, copy_ended)


async def test_a_stopped_jobs_successor_is_held_with_the_reason(lab: Lab, client: Client, task_queue: str,
                                                                tmp_path: Path) -> None:
    chain = Chain(lab, tmp_path)
    backend = SlurmCliBackend()

    def queue() -> list[str]:
        first = chain.submit("first", CRASHING)
        return [first, chain.submit("second", LINK, f"--dependency=afterany:{first}")]

    (first, second), report = await chain.incident(client, task_queue, backend, ResumeStrategy.REQUEUE, queue)

    assert report.state is IncidentState.STOPPED, report.timeline
    assert any(f"held successor(s) of stopped job {first}" in d and second in d for d in report.actions_done), \
        report.actions_done
    held = await backend.get_job(second)
    assert held.held and held.state.value == "PENDING"
    assert not (tmp_path / "ran-second").exists()  # afterany would have started it the moment the first ended


def _time(lab: Lab, job_id: str, field: str) -> datetime:
    return datetime.fromisoformat(split_record(lab.run("scontrol", "show", "job", "-o", job_id).stdout)[field])


async def _ran(tmp: Path) -> dict[str, str]:
    return {p.name.removeprefix("ran-"): p.read_text().split()[0] for p in tmp.glob("ran-*")}
