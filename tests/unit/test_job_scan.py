"""The cluster watcher's job scan: a line per job, records only where needed, and the same
anomalies and log watchers as reading every record every time (#29)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activities.adapters.job_scan import JobScanner
from goodput.detect.job_scan import KnownJob, plan
from goodput.detect.scan_memory import of_scan
from goodput.detect.scheduler_watch import Snapshot, changes, new_running, snapshot
from goodput.detect.watch import OptInRule
from goodput.models import Anomaly
from goodput.scheduler import (
    ACTIVE_JOB_STATES,
    JobInfo,
    JobState,
    JobStatus,
    PermanentSchedulerError,
    Scheduler,
    UnknownJobError,
    statuses_of,
)

NOW = datetime(2026, 12, 5, tzinfo=UTC)
ADMITS = OptInRule().admits


class Jobs:
    """A controller's job table, and how often each kind of read was asked of it."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobInfo] = {}
        self.whole_reads = 0
        self.record_reads: list[str] = []

    async def list_jobs(self) -> Sequence[JobInfo]:
        self.whole_reads += 1
        return list(self.jobs.values())

    async def list_job_statuses(self, node: str = "") -> Sequence[JobStatus]:
        return statuses_of(list(self.jobs.values()), node)

    async def get_job(self, job_id: str) -> JobInfo:
        self.record_reads.append(job_id)
        if job_id not in self.jobs:
            raise UnknownJobError(job_id)
        return self.jobs[job_id]


def job(job_id: str, state: JobState = JobState.RUNNING, *, opted: bool = True, restarts: int = 0,
        nodes: tuple[str, ...] = ("gpu-1",), exit_code: str = "") -> JobInfo:
    return JobInfo(job_id=job_id, state=state, restart_count=restarts, nodes=nodes, exit_code=exit_code,
                   comment="goodput:opt-in" if opted else "mine", stdout_path=f"/home/u/slurm-{job_id}.out")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scanner(jobs: Jobs, clock: Clock, **limits: int) -> JobScanner:
    return JobScanner(cast(Scheduler, jobs), ADMITS, clock=clock, **limits)  # type: ignore[arg-type]


def test_after_the_first_scan_a_quiet_cluster_costs_no_record_reads() -> None:
    jobs, clock = Jobs(), Clock()
    jobs.jobs = {str(i): job(str(i), opted=i % 2 == 0) for i in range(1, 200)}
    jobs.jobs["500"] = job("500", JobState.PENDING, nodes=())
    scan = scanner(jobs, clock)
    first = asyncio.run(scan.scan())
    assert first.read_all and jobs.whole_reads == 1 and len(first.watched) == 100
    for _ in range(10):
        clock.now += 2
        again = asyncio.run(scan.scan())
        assert not again.read_all and again.watched == first.watched
    assert jobs.whole_reads == 1 and jobs.record_reads == []
    clock.now += 60  # every record again now and then: a comment may have changed
    assert asyncio.run(scan.scan()).read_all and jobs.whole_reads == 2


def test_a_watched_job_that_ends_is_read_again_for_its_exit_code() -> None:
    jobs, clock = Jobs(), Clock()
    jobs.jobs = {"7": job("7"), "8": job("8", opted=False)}
    scan = scanner(jobs, clock)
    asyncio.run(scan.scan())
    assert jobs.record_reads == ["7", "8"] and jobs.whole_reads == 0  # two records: read alone
    jobs.record_reads.clear()
    jobs.jobs["7"] = job("7", JobState.FAILED, exit_code="93:0")
    jobs.jobs["8"] = job("8", JobState.FAILED, opted=False, exit_code="1:0")
    found = asyncio.run(scan.scan())
    assert jobs.record_reads == ["7"]  # the job goodput does not watch needs no record
    assert found.watched["7"].exit_code == "93:0"
    assert {j.job_id: j.state for j in found.jobs} == {"7": JobState.FAILED, "8": JobState.FAILED}


def test_a_job_first_seen_running_is_read_once_and_a_pending_one_not_yet() -> None:
    jobs, clock = Jobs(), Clock()
    scan = scanner(jobs, clock)
    asyncio.run(scan.scan())
    jobs.jobs = {"3": job("3"), "4": job("4", JobState.PENDING, nodes=())}
    found = asyncio.run(scan.scan())
    assert jobs.record_reads == ["3"] and set(found.watched) == {"3"}
    assert [j.job_id for j in found.jobs] == ["3"]  # the pending job is left out until it runs
    jobs.jobs["3"] = job("3", nodes=("gpu-2",))  # a line's change of nodes needs no record
    jobs.jobs["4"] = job("4")
    found = asyncio.run(scan.scan())
    assert jobs.record_reads == ["3", "4"] and found.watched["3"].nodes == ("gpu-2",)


def test_new_jobs_past_one_scans_reads_wait_ended_first_then_past_the_backlog_all_are_read() -> None:
    jobs, clock = Jobs(), Clock()
    scan = scanner(jobs, clock, max_reads=2, max_backlog=4)
    asyncio.run(scan.scan())
    jobs.jobs = {"10": job("10"), "11": job("11"), "12": job("12", JobState.NODE_FAIL), "13": job("13")}
    found = asyncio.run(scan.scan())
    assert jobs.record_reads == ["12", "10"] and [j.job_id for j in found.jobs] == ["10", "12"]
    found = asyncio.run(scan.scan())
    assert jobs.record_reads[2:] == ["11", "13"] and len(found.jobs) == 4 and jobs.whole_reads == 0
    jobs.jobs.update({str(i): job(str(i)) for i in range(20, 25)})
    assert asyncio.run(scan.scan()).read_all and jobs.whole_reads == 1


def test_a_job_gone_before_its_read_is_left_out_and_a_node_scan_reads_its_few_jobs_alone() -> None:
    plan_ = plan([JobStatus(job_id="5", state=JobState.RUNNING)], {}, refresh_due=False)
    assert plan_.reads == ("5",)
    jobs, clock = Jobs(), Clock()
    jobs.jobs = {"1": job("1", nodes=("gpu-1",)), "2": job("2", nodes=("gpu-2",))}
    scan = JobScanner(cast(Scheduler, jobs), ADMITS, node="gpu-1", clock=clock)  # type: ignore[arg-type]
    found = asyncio.run(scan.scan())
    assert jobs.whole_reads == 0 and jobs.record_reads == ["1"] and list(found.watched) == ["1"]


def test_a_watched_jobs_ending_unread_is_not_reported_from_its_old_record() -> None:
    known = {"7": KnownJob(state=JobState.RUNNING, restart_count=0, record=job("7", exit_code="0:0"))}
    jobs, clock = Jobs(), Clock()
    jobs.jobs = {"7": job("7")}
    scan = scanner(jobs, clock)
    asyncio.run(scan.scan())
    assert plan([JobStatus(job_id="7", state=JobState.FAILED)], known, refresh_due=False).reads == ("7",)

    async def gone(job_id: str) -> JobInfo:
        raise UnknownJobError(job_id)

    jobs.jobs["7"] = job("7", JobState.FAILED, exit_code="13:0")
    jobs.get_job = gone  # type: ignore[method-assign]
    assert asyncio.run(scan.scan()).jobs == ()


# -- the scoped scan says what reading every record every time says -------------------------------

JOB_IDS = [str(100 + i) for i in range(8)]
OPTED = set(JOB_IDS[:5])
NODES = ("gpu-1", "gpu-2", "gpu-3")
a_job = st.tuples(st.sampled_from(list(JobState)), st.integers(0, 2), st.sampled_from(NODES))
cluster = st.dictionaries(st.sampled_from(JOB_IDS), a_job)


def table(drawn: dict[str, tuple[JobState, int, str]]) -> dict[str, JobInfo]:
    return {i: job(i, s, opted=i in OPTED, restarts=r, nodes=() if s is JobState.PENDING else (n,),
                   exit_code=f"{r}:0") for i, (s, r, n) in drawn.items()}


def run(states: list[dict[str, tuple[JobState, int, str]]], *, scoped: bool, max_reads: int = 16,
        max_backlog: int = 64) -> tuple[list[list[Anomaly]], list[list[str]]]:
    jobs, clock = Jobs(), Clock()
    scan = scanner(jobs, clock, max_reads=max_reads, max_backlog=max_backlog)
    previous: Snapshot | None = None
    reported: list[list[Anomaly]] = []
    launched: list[list[str]] = []
    for step, drawn in enumerate(states):
        jobs.jobs = table(drawn)
        clock.now += 2
        if scoped:
            found = asyncio.run(scan.scan())
            listed, watched = list(found.jobs), found.watched
        else:
            listed = list(jobs.jobs.values())
            watched = {j.job_id: j for j in listed if ADMITS(j)}
        at = NOW + timedelta(seconds=2 * step)
        current = snapshot(listed, [], at=at, previous=previous)
        reported.append(changes(previous, current, cluster="c", now=at, watched=watched) if previous else [])
        launched.append([j.job_id for j in new_running(previous or Snapshot(), current, watched)])
        memory = of_scan(current, watched)
        assert memory is not None
        previous = memory.snapshot()
    return reported, launched


def as_slurm_has_it(states: list[dict], *, listed_for: int) -> list[dict]:
    """The drawn tables as Slurm can show them: an ended attempt stays as it ended (only a requeue,
    a new attempt, makes the job active again) and stays listed (MinJobAge, 300 s by default) for
    at least `listed_for` scans."""
    kept: list[dict] = []
    ended_at: dict[str, int] = {}
    for step, drawn in enumerate(states):
        before = kept[-1] if kept else {}
        now = {i: v for i, v in before.items() if i in drawn or (i in ended_at and step - ended_at[i] < listed_for)}
        for i, new in drawn.items():
            if i in before and (new[1] < before[i][1] or (new[1] == before[i][1] and i in ended_at)
                                or (i in ended_at and step - ended_at[i] < listed_for)):
                continue
            now[i] = new
            ended_at.pop(i, None)
            if new[0] not in ACTIVE_JOB_STATES:
                ended_at[i] = step
        kept.append(now)
    return kept


@settings(max_examples=300, deadline=None)
@given(st.lists(cluster, min_size=2, max_size=6))
def test_scan_by_scan_the_lines_and_records_say_what_every_record_says(states: list[dict]) -> None:
    shown = as_slurm_has_it(states, listed_for=0)
    assert run(shown, scoped=True) == run(shown, scoped=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(cluster, min_size=2, max_size=6))
def test_with_reads_left_for_later_no_ending_is_lost_or_told_twice(states: list[dict]) -> None:
    # ended jobs stay listed for as many scans as the backlog takes to drain (3 jobs, 1 read a scan)
    shown = as_slurm_has_it(states, listed_for=4)
    quiet = [shown[-1]] * 8  # the backlog drains while nothing changes
    told, _ = run(shown + quiet, scoped=True, max_reads=1, max_backlog=3)
    whole, _ = run(shown + quiet, scoped=False)
    assert sorted(a.id for scan in told for a in scan) == sorted(a.id for scan in whole for a in scan)


@pytest.mark.parametrize("refresh_due", [True, False])
def test_the_plan_never_reads_a_record_for_a_job_it_does_not_list(refresh_due: bool) -> None:
    statuses = [JobStatus(job_id="1", state=JobState.RUNNING)]
    todo = plan(statuses, {"2": KnownJob(state=JobState.RUNNING, restart_count=0, record=job("2"))},
                refresh_due=refresh_due)
    assert set(todo.reads) <= {"1"}


def test_a_completing_line_after_a_record_said_failed_does_not_end_the_job_twice() -> None:
    jobs, clock = Jobs(), Clock()
    jobs.jobs = {"4": job("4")}
    scan = scanner(jobs, clock)
    asyncio.run(scan.scan())
    clock.now += 60  # the minute's refresh reads the record while the job's processes end
    jobs.jobs["4"] = job("4", JobState.FAILED, exit_code="1:0")
    first = asyncio.run(scan.scan())
    statuses = jobs.list_job_statuses

    async def completing(node: str = "") -> Sequence[JobStatus]:
        return [s.model_copy(update={"state": JobState.COMPLETING}) for s in await statuses(node)]

    jobs.list_job_statuses = completing  # type: ignore[method-assign]
    clock.now += 2
    second = asyncio.run(scan.scan())
    jobs.list_job_statuses = statuses  # type: ignore[method-assign]
    clock.now += 2
    third = asyncio.run(scan.scan())
    assert [s.jobs[0].state for s in (first, second, third)] == [JobState.FAILED] * 3
    previous = snapshot(list(first.jobs), [], at=NOW)
    for later in (second, third):
        current = snapshot(list(later.jobs), [], at=NOW)
        assert changes(previous, current, cluster="c", now=NOW, watched=later.watched) == []
        previous = current


def test_when_every_record_at_once_cannot_be_read_the_scan_goes_on_with_single_reads() -> None:
    # `squeue --json` past the runner's 64 MB (about 11,000 jobs in 24.11's form) is cut off and refused
    jobs, clock = Jobs(), Clock()
    jobs.jobs = {str(i): job(str(i), opted=i % 2 == 0) for i in range(1, 41)}

    async def too_large() -> Sequence[JobInfo]:
        jobs.whole_reads += 1
        raise PermanentSchedulerError("squeue --json: the answer was cut off at 64 MB")

    jobs.list_jobs = too_large  # type: ignore[method-assign]
    scan = scanner(jobs, clock)
    seen: set[str] = set()
    for _ in range(3):  # 16 records a scan: 40 jobs in three scans
        found = asyncio.run(scan.scan())
        seen |= {j.job_id for j in found.jobs}
        clock.now += 2
    assert seen == set(jobs.jobs) and len(jobs.record_reads) == 40 and jobs.whole_reads == 1
    assert len(found.watched) == 20 and scan.whole_read_failures == 1
    clock.now += 60  # tried again a refresh later, not every scan
    asyncio.run(scan.scan())
    assert jobs.whole_reads == 2
