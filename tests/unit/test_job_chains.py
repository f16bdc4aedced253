"""Job chains: successors of a resubmitted job wait on its copy; successors of a job goodput
stopped for good are held; another user's job and text outside Slurm's grammar are left alone."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.job_scan import MAX_OWNER_READS
from activities.job_chains import owners_queue
from activities.recovery import RecoveryActivities
from goodput.demo.scheduler import FakeScheduler
from goodput.recover.breaker import LocalDrainGate
from goodput.recover.incident import ResumeInput, StopInput
from goodput.recover.policy import ResumeStrategy
from goodput.scheduler import JobInfo, JobState, JobStatus, statuses_of
from goodput.slurm.commands import update_dependency
from goodput.slurm.dependencies import DependencyError, parse, repoint_plan, repointed, successors_to_hold
from tests.fakes.notifier import RecordingNotifier

ALICE, BOB = 1001, 1002


def job(job_id: str, dependency: str = "", *, uid: int = ALICE, state: JobState = JobState.PENDING,
        held: bool = False) -> JobInfo:
    return JobInfo(job_id=job_id, state=state, dependency=dependency, user="alice" if uid == ALICE else "bob",
                   user_id=uid, held=held, comment="goodput:opt-in")


@pytest.mark.parametrize(("text", "rendered"), [
    ("afterok:12(unfulfilled)", "afterok:12"),
    ("afterok:12:13(unfulfilled),afterany:14", "afterok:12:13,afterany:14"),
    ("afterany:12?afternotok:13(failed)", "afterany:12?afternotok:13"),
    ("after:12+30", "after:12+30"),
    ("aftercorr:12_*", "aftercorr:12_*"),
    ("singleton", "singleton"),
])
def test_slurms_dependency_text_parses_and_renders_without_its_state_notes(text: str, rendered: str) -> None:
    parsed = parse(text)
    assert parsed is not None and parsed.render() == rendered
    assert parse("") is None and parse("(null)") is None


@pytest.mark.parametrize("text", ["afterok", "afterok:", "afterok:abc", "afterok:12;rm -rf /", "before:12",
                                  "afterok:12,afterany:13?afterok:14", "afterok:12+5", "afterok:12 x", "é",
                                  "afterok:" + ":".join(["1"] * 600)])
def test_anything_outside_the_grammar_is_refused(text: str) -> None:
    with pytest.raises(DependencyError):
        parse(text)


def test_repointing_swaps_the_job_and_keeps_array_tasks_and_other_predecessors() -> None:
    parsed = parse("afterok:12:120(unfulfilled),aftercorr:12_3,afterany:99")
    assert parsed is not None and parsed.names("12") and not parsed.names("1")
    assert repointed(parsed, "12", "40").render() == "afterok:40:120,aftercorr:40_3,afterany:99"


def test_only_the_owners_queued_successors_are_repointed() -> None:
    original = job("12", state=JobState.FAILED)
    queue = [original, job("13", "afterok:12(unfulfilled)"), job("14", "afterany:12", uid=BOB),
             job("15", "afterok:99"), job("16", "afterok:12", state=JobState.RUNNING), job("17", "afterok:12;x")]
    plan = repoint_plan(queue, original, "40")
    assert [(u.job_id, u.dependency) for u in plan.updates] == [("13", "afterok:40")]
    assert any("14" in s and "another user" in s for s in plan.skipped)
    assert any(s.startswith("job 17") for s in plan.skipped)
    held = successors_to_hold([*queue, job("18", "afterok:12", held=True)], original)
    assert [u.job_id for u in held.updates] == ["13"]  # 18 is held already


def test_what_goodput_writes_back_is_one_scontrol_argument() -> None:
    assert update_dependency("13", "afterok:40") == ["scontrol", "update", "JobId=13", "Dependency=afterok:40"]
    with pytest.raises(ValueError, match="refusing"):
        update_dependency("13", "afterok:40 Partition=admin")


async def test_a_resubmission_repoints_the_chain_before_the_original_is_cancelled() -> None:
    fake = FakeScheduler()
    first = (await fake.list_jobs())[0]
    fake.add_job(job("2001", f"afterok:{first.job_id}(unfulfilled)", uid=first.user_id or 0))
    fake.add_job(job("2002", "afterok:2001(unfulfilled)", uid=first.user_id or 0))
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    resumed = await ActivityEnvironment().run(activities.resume, ResumeInput(
        incident_id="inc-1", job_id=first.job_id, strategy=ResumeStrategy.RESUBMIT))
    assert (await fake.get_job("2001")).dependency == f"afterok:{resumed.job_id}"
    assert (await fake.get_job("2002")).dependency == "afterok:2001(unfulfilled)"  # waits on 2001, unchanged
    ops = [e.op for e in fake.journal()]
    assert ops.index("dependency") < ops.index("cancel")
    assert f"re-pointed successor(s) to {resumed.job_id}: 2001" in resumed.detail


async def test_stopping_a_job_for_good_holds_its_successors_first() -> None:
    fake = FakeScheduler()
    first = (await fake.list_jobs())[0]
    fake.add_job(job("2001", f"afterany:{first.job_id}", uid=first.user_id or 0))
    activities = RecoveryActivities(fake, RecordingNotifier(), LocalDrainGate())
    detail = await ActivityEnvironment().run(activities.stop_job, StopInput(incident_id="inc-1",
                                                                             job_id=first.job_id))
    assert (await fake.get_job("2001")).held
    ops = [e.op for e in fake.journal()]
    assert ops.index("hold") < ops.index("cancel")
    assert "held successor(s) of stopped job" in detail and "2001" in detail


class CountingScheduler(FakeScheduler):
    """The fake's queue, counting every job's record read at once and each single read."""

    def __init__(self) -> None:
        super().__init__()
        self.whole = 0
        self.single: list[str] = []

    async def list_jobs(self) -> Sequence[JobInfo]:
        self.whole += 1
        return await super().list_jobs()

    async def list_job_statuses(self, node: str = "", user_id: int | None = None) -> Sequence[JobStatus]:
        return statuses_of(list(await super().list_jobs()), node, user_id)

    async def get_job(self, job_id: str) -> JobInfo:
        self.single.append(job_id)
        return self.snapshot().jobs[job_id]  # as queued: the demo's read would start pending jobs


async def test_a_chain_reads_the_owners_queued_jobs_not_the_cluster() -> None:
    fake = CountingScheduler()
    original = job("12", state=JobState.FAILED)
    for queued in (original, job("13", "afterok:12(unfulfilled)"), job("14", "afterok:12", uid=BOB),
                   *(job(str(100 + i), uid=BOB) for i in range(100))):
        fake.add_job(queued)
    plan = repoint_plan(await owners_queue(fake, original), original, "40")
    assert [(u.job_id, u.dependency) for u in plan.updates] == [("13", "afterok:40")]
    assert fake.whole == 0 and fake.single == ["13"]  # bob's 101 queued jobs are not read
    for i in range(MAX_OWNER_READS):  # an owner with a long queue: every record at once is cheaper
        fake.add_job(job(str(300 + i)))
    assert "13" in {j.job_id for j in await owners_queue(fake, original)} and fake.whole == 1
    unknown_owner = original.model_copy(update={"user_id": None})
    await owners_queue(fake, unknown_owner)
    assert fake.whole == 2
