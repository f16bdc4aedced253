"""The recovery goodput exists for, end to end on the live lab, through the CLI backend.

A 2-node `--requeue` training job with a checkpoint runs; one of its nodes goes bad. goodput
drains that node with its own reason, requeues the job and resubmits a copy that excludes the
node. Slurm must show goodput's reason on the node, the requeued job must run again elsewhere
and resume from its checkpoint, and the resubmitted copy must run without the bad node and see
the extra environment. Timing: with cred_expire=10 a requeued job runs again about 12 s later.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.ownership import drain_reason, owning_incident
from goodput.scheduler import JobState, ResubmitRequest

from .conftest import Lab
from .harness import eventually

pytestmark = pytest.mark.slurm

SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --gres=gpu:1
#SBATCH --comment=goodput:opt-in
ck={workdir}/ckpt-$SLURM_JOB_ID
echo "run restart=${{SLURM_RESTART_COUNT:-0}} nodes=$SLURM_JOB_NODELIST env=${{GOODPUT_RECOVERY:-none}}"
step=$(cat "$ck" 2>/dev/null || echo 0)
while true; do step=$((step + 1)); echo "$step" > "$ck"; sleep 0.5; done
"""


async def test_drain_requeue_resubmit_runs_elsewhere(lab: Lab, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    script = tmp_path / "train.sbatch"
    script.write_text(SCRIPT.format(workdir=tmp_path))
    job_id = lab.sbatch("--requeue", "--job-name=train-llm", f"--output={tmp_path}/out-%j.log",
                        f"--chdir={tmp_path}", str(script))
    backend = SlurmCliBackend()

    job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                           timeout=20, what="training job to run")
    assert len(job.nodes) == 2 and job.requeue
    checkpoint = tmp_path / f"ckpt-{job_id}"
    await eventually(lambda: _read_int(checkpoint), lambda step: step >= 2, timeout=20,
                     what="first checkpoints")
    bad = job.nodes[-1]

    # goodput isolates the bad node with its own reason ...
    reason = drain_reason("inc-scenario", "xid 79: GPU has fallen off the bus")
    assert (await backend.drain_node(bad, reason)).changed
    raw = lab.node(bad)
    assert raw["Reason"] == reason and "DRAIN" in raw["State"]
    assert owning_incident(raw["Reason"]) == "inc-scenario"

    # ... requeues the job and resubmits a copy that excludes the node
    assert (await backend.requeue_job(job_id)).changed
    assert not (await backend.requeue_job(job_id)).changed  # a retried activity changes nothing
    resubmitted = await backend.resubmit_job(job_id, ResubmitRequest(
        exclude=(bad,), environment={"GOODPUT_RECOVERY": "inc-scenario"}))
    assert resubmitted.new_job_id
    copy = await eventually(lambda: backend.get_job(resubmitted.new_job_id or ""),
                            lambda j: j.state is JobState.RUNNING, timeout=20, what="resubmitted job")
    assert bad not in copy.nodes and len(copy.nodes) == 2
    assert copy.excluded_nodes == (bad,)
    assert copy.comment.startswith(f"goodput:resubmit-of={job_id}:") and copy.comment.endswith(" goodput:opt-in")
    assert copy.partition == job.partition
    out = tmp_path / f"out-{copy.job_id}.log"  # the %j pattern was kept, not the old file
    await eventually(lambda: _read(out), lambda text: "env=inc-scenario" in text, timeout=10,
                     what="resubmitted job output")

    # the requeued original runs again on healthy nodes and resumes from its checkpoint
    step_before = await _read_int(checkpoint)
    again = await eventually(lambda: backend.get_job(job_id),
                             lambda j: j.state is JobState.RUNNING and j.restart_count == 1,
                             timeout=40, what="requeued job to run again")
    assert bad not in again.nodes
    await eventually(lambda: _read_int(checkpoint), lambda step: step > step_before, timeout=20,
                     what="checkpoint to advance after the restart")
    assert (await backend.get_node(bad)).reason == reason  # still goodput's, untouched by Slurm


async def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def _read_int(path: Path) -> int:
    text = (await _read(path)).strip()
    return int(text) if text.isdigit() else 0
