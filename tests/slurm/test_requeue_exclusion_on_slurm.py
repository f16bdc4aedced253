"""On the lab: a requeue away from a node goodput distrusts but did not drain (a suspect of the
node memory, a node whose drain the breaker refused) never runs the job there again."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.recovery import RecoveryActivities
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm]


async def test_a_requeued_job_never_runs_on_the_excluded_node_though_it_is_not_drained(
        lab: Lab, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\nsleep 300\n")
    job_id = lab.sbatch(f"--output={tmp_path}/out-%j.log", "--comment=goodput:opt-in", "--requeue", str(script))
    backend = SlurmCliBackend()
    first = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                             what="the job running")
    suspect = first.nodes[0]
    resumed = await ActivityEnvironment().run(
        RecoveryActivities(backend, RecordingNotifier(), LocalDrainGate()).resume,
        ResumeInput(incident_id="inc-x", job_id=job_id, strategy=ResumeStrategy.REQUEUE, exclude=(suspect,)))
    again = await eventually(lambda: backend.get_job(job_id),
                             lambda j: j.state is JobState.RUNNING and j.restart_count == 1, timeout=60,
                             what="the job running again")
    assert suspect not in again.nodes and suspect in again.excluded_nodes and not again.held
    assert "DRAIN" not in lab.node(suspect)["State"]  # excluded, not drained
    assert f"now excludes {suspect}" in resumed.detail
