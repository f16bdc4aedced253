"""A requeue away from distrusted nodes: held, excluded, released, so the job cannot start on a
node goodput excluded (drained or not) in between; a retry after a crash mid-way finishes it."""

from __future__ import annotations

import dataclasses

from temporalio.testing import ActivityEnvironment

from activities.recovery import RecoveryActivities
from goodput.demo.scheduler import FakeScheduler
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput
from goodput.recover.policy import ResumeStrategy
from tests.fakes.notifier import RecordingNotifier


async def test_a_requeue_with_exclusions_is_held_excluded_then_released() -> None:
    fake = FakeScheduler()
    job = (await fake.list_jobs())[0]
    suspect = job.nodes[0]
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    resumed = await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id="inc-1", job_id=job.job_id, strategy=ResumeStrategy.REQUEUE, exclude=(suspect,)))
    after = await fake.get_job(job.job_id)
    assert suspect in after.excluded_nodes and suspect not in after.nodes and not after.held
    ops = [(e.op, e.detail) for e in fake.journal()]
    assert [op for op, _ in ops] == ["requeue", "exclude", "release"] and ops[0][1] == "hold=True"
    assert resumed.changed and f"now excludes {suspect}" in resumed.detail


async def test_a_retry_after_a_crash_between_requeue_and_release_finishes_the_job() -> None:
    fake = FakeScheduler()
    job = (await fake.list_jobs())[0]
    await fake.requeue_job(job.job_id, hold=True)  # the first attempt got this far
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, attempt=2)  # Temporal's retry of that activity
    await retry.run(activities.resume, ResumeInput(
        incident_id="inc-1", job_id=job.job_id, strategy=ResumeStrategy.REQUEUE, exclude=(job.nodes[0],),
        restart_count_before=job.restart_count))
    after = await fake.get_job(job.job_id)
    assert not after.held and job.nodes[0] in after.excluded_nodes and after.restart_count == job.restart_count + 1


async def test_without_exclusions_a_requeue_is_a_plain_requeue() -> None:
    fake = FakeScheduler()
    job = (await fake.list_jobs())[0]
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id="inc-1", job_id=job.job_id, strategy=ResumeStrategy.REQUEUE))
    assert [(e.op, e.detail) for e in fake.journal()] == [("requeue", "hold=False")]
