"""A job that restarted itself since the failure (submitit's signal handler, `scontrol requeue`
in its own script) is never restarted a second time, whichever way goodput would resume it."""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from activities.recovery import RecoveryActivities
from goodput.demo.scheduler import FakeScheduler
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput
from goodput.recover.policy import ResumeStrategy
from tests.fakes.notifier import RecordingNotifier


@pytest.mark.parametrize("strategy", [ResumeStrategy.REQUEUE, ResumeStrategy.RESUBMIT])
async def test_a_job_that_requeued_itself_is_left_alone(strategy: ResumeStrategy) -> None:
    fake = FakeScheduler()
    job = (await fake.list_jobs())[0]
    await fake.requeue_job(job.job_id)  # the job's own handler, before goodput got to it
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    before = len(fake.journal())
    resumed = await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id="inc-1", job_id=job.job_id, strategy=strategy, restart_count_before=job.restart_count))
    assert not resumed.changed and resumed.job_id == job.job_id
    assert len(fake.journal()) == before  # no requeue, no copy, no cancel
    assert (await fake.get_job(job.job_id)).restart_count == job.restart_count + 1


async def test_a_job_that_did_not_restart_itself_is_resubmitted() -> None:
    fake = FakeScheduler()
    job = (await fake.list_jobs())[0]
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    resumed = await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id="inc-1", job_id=job.job_id, strategy=ResumeStrategy.RESUBMIT,
        restart_count_before=job.restart_count))
    assert resumed.changed and resumed.job_id != job.job_id
