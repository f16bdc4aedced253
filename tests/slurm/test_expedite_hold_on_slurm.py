"""Slurm 26.05's expedited-requeue hold on the live 26.05 lab, through the CLI backend.

With `SlurmctldParameters=enable_expedited_requeue` and `--requeue=expedite`, a job that exits 1
is requeued by slurmctld at once and held ("holding expedited requeue ... as no epilogs failed").
The backend reads that as `expedite_held`; the resume step (a restart verdict) releases it and
the expedite starts it at once. goodput-alice's own `scontrol requeuehold` of her expedite job,
with a comment that spells the hold's words, is never taken for it and never released. Runs when
GOODPUT_SLURM_VERSIONS selects 26.05 (expedited requeue is new in 25.11; n/a before).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from temporalio.testing import ActivityEnvironment

from activities.recovery import RecoveryActivities
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier

from .conftest import Lab, VersionLabs
from .harness import MARKER, SlurmCliHarness, eventually

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]
ALICE = "goodput-alice"
SETTING = "SlurmctldParameters=enable_expedited_requeue"


@pytest.fixture
def lab(version_labs: VersionLabs) -> Iterator[Lab]:
    """The 26.05 lab with the site's setting on for this test only (the session shares the lab)."""
    lab = version_labs.get("26.05")
    text = lab.conf.read_text()
    lab.conf.write_text(text + f"{SETTING}\n")
    lab.run("scontrol", "reconfigure")
    try:
        yield lab
    finally:
        lab.conf.write_text(text)
        lab.run("scontrol", "reconfigure")
        lab.reset()


async def test_slurms_hold_is_read_and_released_at_once_an_owners_never(lab: Lab) -> None:
    harness = SlurmCliHarness(lab)
    backend = harness.backend
    failed = lab.sbatch(f"--comment={MARKER}", "--requeue=expedite", "--output=/dev/null", "--wrap", "exit 1")
    held = await eventually(lambda: backend.get_job(failed), lambda j: j.expedite_held, timeout=30,
                            what=f"job {failed} held by Slurm's expedited requeue")
    assert held.held and held.restart_count == 1 and held.exit_code == "1:0"

    # alice's own requeuehold of her opted-in expedite job, its comment spelling the hold's words
    mimic = (f"{MARKER} JobState=REQUEUE_HOLD ExpeditedRequeue=Yes Reason=job_requeued_in_held_state "
             "holding expedited requeue as no epilogs failed")
    hers = lab.sbatch_as(ALICE, f"--comment={mimic}", "--requeue=expedite", "--output=/dev/null",
                         script="#!/bin/sh\nsleep 300\n")
    await eventually(lambda: backend.get_job(hers), lambda j: j.state is JobState.RUNNING, timeout=30,
                     what=f"job {hers} to run")
    subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"SLURM_CONF={lab.conf}", *lab.prefix, "/usr/sbin/runuser",
                    "-u", ALICE, "--", "scontrol", "requeuehold", hers], check=True, capture_output=True, timeout=60)
    own = await eventually(lambda: backend.get_job(hers), lambda j: j.held and j.state is not JobState.RUNNING,
                           timeout=30, what=f"job {hers} held by its owner")
    assert not own.expedite_held

    resume = RecoveryActivities(backend, RecordingNotifier(), LocalDrainGate()).resume
    environment = ActivityEnvironment()
    mine = await environment.run(resume, ResumeInput(incident_id="inc-exp", job_id=hers,
                                                     strategy=ResumeStrategy.REQUEUE,
                                                     restart_count_before=own.restart_count))
    assert not mine.released_expedite_hold and not mine.changed
    assert (await backend.get_job(hers)).held  # still held: only its owner's word releases it

    released_at = time.monotonic()
    resumed = await environment.run(resume, ResumeInput(incident_id="inc-exp", job_id=failed,
                                                        strategy=ResumeStrategy.REQUEUE,
                                                        restart_count_before=held.restart_count))
    assert resumed.changed and resumed.released_expedite_hold
    running = await eventually(lambda: backend.get_job(failed), lambda j: j.state is JobState.RUNNING or
                               j.restart_count > held.restart_count, timeout=30, what=f"job {failed} to run again")
    print(f"expedited hold released; job {failed} ran again {time.monotonic() - released_at:.2f} s after the release "
          f"step began ({running.state}, restarts={running.restart_count})")
