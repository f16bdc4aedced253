"""On the lab: when one task of a job array fails, goodput recovers that task alone, not the
whole array and not only the first task: the other tasks still run, unheld, and slurmctld's log
names no action on them (a cancelled, held or requeued sibling would fail it)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.detect.watch import WatchClusterInput
from goodput.models import Category, IncidentKey
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import result
from tests.workflows.test_watchers import incident_appears
from workers.watch import start_cluster_watch
from workers.worker import build_worker
from workflows.watch import cluster_watch_id

from .conftest import Lab, SlurmRecords
from .harness import eventually, past_baseline
from .test_training_e2e import policy

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow]

# Task 1's first run meets an Xid and dies; every other run trains for a while.
ARRAY = """#!/bin/bash
for i in $(seq 1 400); do
  echo "iteration $i/ 400 | loss 1.0 | elapsed time per iteration (ms): 250.0"
  if [ "$SLURM_ARRAY_TASK_ID" = 1 ] && [ "$i" = 4 ] && [ ! -e {tmp}/faulted ]; then
    touch {tmp}/faulted
    xid="NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, GPU has fallen off the bus."
    echo "$(date '+%b %d %H:%M:%S') $SLURMD_NODENAME kernel: $xid"
    exit 1
  fi
  sleep 0.25
done
"""


async def test_one_failed_array_task_is_recovered_alone(lab: Lab, records: SlurmRecords, client: Client,
                                                        task_queue: str, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    cluster = f"arr{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    script = tmp_path / "array.sbatch"
    script.write_text(ARRAY.format(tmp=tmp_path))
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy(
            resume=ResumeStrategy.REQUEUE)):
        await start_cluster_watch(client, task_queue, WatchClusterInput(
            cluster=cluster, poll_interval_s=0.5, log_poll_interval_s=0.1))
        try:
            await past_baseline(lab, client, cluster)
            array = lab.sbatch(f"--output={tmp_path}/out-%A_%a.log", f"--chdir={tmp_path}", "--array=0-2",
                               "--comment=goodput:opt-in", "--requeue", str(script))
            tasks = await eventually(lambda: _tasks(lab, array), lambda t: len(set(t)) == 3, timeout=30,
                                     what="the array's three tasks")
            key = IncidentKey(cluster=cluster, job_id=tasks[1], job_attempt=0)
            await incident_appears(client, key, timeout_s=60)
            report = await result(client, key.workflow_id)
            others = [await backend.get_job(tasks[i]) for i in (0, 2)]
            failed = await backend.get_job(tasks[1])
        finally:
            await client.get_workflow_handle(cluster_watch_id(cluster)).terminate("scenario over")

    assert report.state is IncidentState.RECOVERED, report.timeline
    assert report.attribution is not None and report.attribution.category is Category.GPU_HARDWARE
    assert any("Xid" in line for a in report.anomalies for line in a.evidence)  # its own log was read
    assert report.key.job_id == tasks[1] and report.resumed_job_id == tasks[1]
    assert failed.restart_count == 1 and failed.state is JobState.RUNNING
    # the rest of the array was never touched: still running, never held, requeued or signalled
    assert [(o.state, o.held, o.restart_count) for o in others] == [(JobState.RUNNING, False, 0)] * 2, others
    assert [records.actions_on(tasks[i], f"{array}_{i}") for i in (0, 2)] == [[], []], records.text()
    assert records.actions_on(tasks[1], f"{array}_1"), records.text()  # the same search finds the failed task's


async def _tasks(lab: Lab, array: str) -> list[str]:
    """The job ids of the array's tasks 0, 1, 2 (each task is a job of its own to Slurm once it
    starts; while pending the array is one record, and every task shows the array's id)."""
    found = []
    for task in range(3):
        shown = lab.run("scontrol", "show", "job", "-o", f"{array}_{task}", check=False).stdout
        match = re.search(r"\bJobId=(\d+)", shown)
        if match is None:
            return []
        found.append(match.group(1))
    return found
