"""Slurm 25.11+'s expedited-requeue hold, read and acted on (docs/slurm.md, "Expedited requeue").

With `SlurmctldParameters=enable_expedited_requeue` and a job submitted with
`--requeue=expedite`, a job that exits non-zero is requeued by slurmctld in the same millisecond
and held ("holding expedited requeue JobId=N as no epilogs failed"). Recorded on the 26.05 lab
(tests/fixtures/slurm/26.05/): job 1 so held (exit 1); job 3, goodput-alice's own `scontrol
requeuehold` of her expedite job; job 4, her `scontrol hold`. Only job 1 is Slurm's hold.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.recovery import RecoveryActivities
from goodput.demo.scheduler import FakeScheduler
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput, ResumeResult
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobInfo, JobState
from goodput.slurm.jsonout import find_job, load
from goodput.slurm.records import job_from_record, split_record
from tests.fakes.notifier import RecordingNotifier

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "26.05"


def _json(stem: str, job_id: str) -> JobInfo:
    return find_job(load((FIXTURES / f"scontrol-job-{stem}-26.05.json").read_text()), job_id)


def _text(stem: str) -> JobInfo:
    return job_from_record(split_record((FIXTURES / f"scontrol-job-{stem}-26.05.txt").read_text()))


def test_slurms_expedited_hold_is_recognised_in_json_and_text() -> None:
    for job in (_json("expedite-held", "1"), _text("expedite-held")):
        assert job.held and job.expedite_held and job.restart_count == 1 and job.exit_code == "1:0"


def test_an_owners_requeuehold_or_hold_of_an_expedite_job_is_not_slurms_hold() -> None:
    # Same reason text (job_requeued_in_held_state) and the same job flag as Slurm's own hold.
    assert _json("requeuehold-user", "3").held and not _json("requeuehold-user", "3").expedite_held
    assert _text("requeuehold-user").held and not _text("requeuehold-user").expedite_held
    assert not _text("held-user").expedite_held


def test_a_comment_mimicking_the_hold_does_not_make_one() -> None:
    document = json.loads((FIXTURES / "scontrol-job-requeuehold-user-26.05.json").read_text())
    document["jobs"][0]["comment"] = ("REQUEUE_HOLD EXPEDITED_REQUEUE holding expedited requeue JobId=3 as no "
                                      "epilogs failed JobState=REQUEUE_HOLD ExpeditedRequeue=Yes ExitCode=1:0")
    document["jobs"][0]["name"] = "EXPEDITED_REQUEUE"
    assert not find_job(load(json.dumps(document)), "3").expedite_held


async def _held_by_slurm(fake: FakeScheduler, *, expedite: bool) -> JobInfo:
    """The fake's first job as slurmctld leaves it after its own requeue (or an owner's requeuehold)."""
    job = (await fake.list_jobs())[0]
    held = job.model_copy(update={"state": JobState.PENDING, "held": True, "expedite_held": expedite,
                                  "restart_count": job.restart_count + 1, "exit_code": "1:0" if expedite else "0:0",
                                  "state_reason": "job_requeued_in_held_state"})
    fake.add_job(held)
    return held


async def _resume(fake: FakeScheduler, job: JobInfo) -> ResumeResult:
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    # The incident read the job after Slurm's requeue: its restart count is the baseline.
    return await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id="inc-1", job_id=job.job_id, strategy=ResumeStrategy.REQUEUE,
        restart_count_before=job.restart_count))


async def test_a_restart_verdict_releases_slurms_expedited_hold() -> None:
    fake = FakeScheduler()
    job = await _held_by_slurm(fake, expedite=True)
    resumed = await _resume(fake, job)
    assert resumed.changed and resumed.released_expedite_hold
    after = await fake.get_job(job.job_id)
    assert after.state is JobState.RUNNING and not after.held and not after.expedite_held
    assert after.restart_count == job.restart_count  # a release does not move the count
    assert [e.op for e in fake.journal()][-1:] == ["release"]


async def test_an_owners_requeuehold_is_never_released() -> None:
    fake = FakeScheduler()
    job = await _held_by_slurm(fake, expedite=False)
    resumed = await _resume(fake, job)
    assert not resumed.changed and not resumed.released_expedite_hold
    assert (await fake.get_job(job.job_id)).held
    assert "release" not in [e.op for e in fake.journal()]


async def test_an_owners_requeuehold_after_the_failure_is_never_released() -> None:
    # The incident read the job before its owner's `scontrol requeuehold` moved the count: the
    # "already requeued" path. Its release is for goodput's own requeue-hold, i.e. a retried
    # activity; a first attempt finding a held job found someone else's hold.
    fake = FakeScheduler()
    job = (await fake.list_jobs())[0]
    await _held_by_slurm(fake, expedite=False)
    resumed = await _resume(fake, job)
    assert not resumed.changed and "not released" in resumed.detail
    assert (await fake.get_job(job.job_id)).held
    assert "release" not in [e.op for e in fake.journal()]


async def test_a_resubmission_is_not_fooled_by_slurms_own_requeue() -> None:
    # Read before Slurm's requeue: the count moved, but the job did not restart itself; it is
    # held. A copy is made (the held original cancelled), not a wait on a job that never runs.
    fake = FakeScheduler()
    job = (await fake.list_jobs())[0]
    await _held_by_slurm(fake, expedite=True)
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    resumed = await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id="inc-1", job_id=job.job_id, strategy=ResumeStrategy.RESUBMIT,
        restart_count_before=job.restart_count))
    assert resumed.changed and resumed.job_id != job.job_id
    assert (await fake.get_job(job.job_id)).state is JobState.CANCELLED
    assert (await fake.get_job(resumed.job_id)).state is JobState.RUNNING
