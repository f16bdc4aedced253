"""A requeue on the straight path reuses the attribute step's record of the job with its state read
fresh (one `scontrol show job` per incident, not two: #29), and still never requeues twice."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from activities.recovery import RecoveryActivities
from activities.resume import KNOWN_MAX_AGE_S, job_now
from goodput.demo.scheduler import FakeScheduler
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobInfo, JobStatus, status_of
from tests.fakes.notifier import RecordingNotifier


class CountingScheduler(FakeScheduler):
    """The fake, telling whole-job reads (`scontrol show job`) from status reads (`squeue`)."""

    def __init__(self) -> None:
        super().__init__()
        self.whole = 0
        self.status = 0

    async def get_job(self, job_id: str) -> JobInfo:
        self.whole += 1
        return await super().get_job(job_id)

    async def job_status(self, job_id: str) -> JobStatus:
        self.status += 1
        return status_of(await FakeScheduler.get_job(self, job_id))


def _request(job: JobInfo, *, age_s: float = 1.0, exclude: tuple[str, ...] = ()) -> ResumeInput:
    return ResumeInput(incident_id="inc-1", job_id=job.job_id, strategy=ResumeStrategy.REQUEUE, exclude=exclude,
                       restart_count_before=job.restart_count, known=job,
                       known_at=datetime.now(UTC) - timedelta(seconds=age_s))


def _attempt(n: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=n)
    return env


async def test_a_young_record_is_reused_with_its_state_read_fresh() -> None:
    fake = CountingScheduler()
    job = (await fake.list_jobs())[0]
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    resumed = await _attempt(1).run(activities.resume, _request(job, exclude=(job.nodes[0],)))
    after = await FakeScheduler.get_job(fake, job.job_id)
    assert resumed.changed and after.restart_count == job.restart_count + 1 and not after.held
    assert job.nodes[0] in after.excluded_nodes
    assert fake.whole == 0 and fake.status > 0  # requeue, exclude and release on the one record


async def test_a_job_requeued_since_the_record_is_read_whole_and_not_requeued_again() -> None:
    fake = CountingScheduler()
    job = (await fake.list_jobs())[0]
    await fake.requeue_job(job.job_id)  # the job's own handler, after goodput read it
    fake.whole = 0
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    before = len(fake.journal())
    resumed = await _attempt(1).run(activities.resume, _request(job))
    assert not resumed.changed and "already requeued" in resumed.detail
    assert len(fake.journal()) == before  # the stale record's RUNNING never leads to a second requeue
    assert fake.whole == 1  # why it moved is read from the whole record, as before


async def test_a_retry_reads_the_whole_job_and_does_not_requeue_twice() -> None:
    fake = CountingScheduler()
    job = (await fake.list_jobs())[0]
    await fake.requeue_job(job.job_id, hold=True)  # the first attempt got this far, then its worker died
    fake.whole = 0
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    await _attempt(2).run(activities.resume, _request(job, exclude=(job.nodes[0],)))
    after = await FakeScheduler.get_job(fake, job.job_id)
    assert after.restart_count == job.restart_count + 1 and not after.held
    assert [e.op for e in fake.journal()].count("requeue") == 1
    assert fake.whole >= 1


@pytest.mark.parametrize("age_s", [KNOWN_MAX_AGE_S + 1, -30.0])
async def test_an_old_or_future_record_is_read_again(age_s: float) -> None:
    fake = CountingScheduler()
    job = (await fake.list_jobs())[0]
    got = await _attempt(1).run(job_now, fake, _request(job, age_s=age_s))
    assert fake.whole == 1 and fake.status == 0 and got.job_id == job.job_id


async def test_another_jobs_record_or_none_is_never_reused() -> None:
    fake = CountingScheduler()
    first, second = (await fake.list_jobs())[:2]
    await _attempt(1).run(job_now, fake, _request(first).model_copy(update={"known": second}))
    await _attempt(1).run(job_now, fake, _request(first).model_copy(update={"known": None}))
    assert fake.whole == 2 and fake.status == 0


async def test_an_owner_hold_since_the_record_is_read_whole() -> None:
    fake = CountingScheduler()
    job = (await fake.list_jobs())[0]
    await fake.hold_job(job.job_id)
    got = await _attempt(1).run(job_now, fake, _request(job))
    assert fake.whole == 1 and got.held
