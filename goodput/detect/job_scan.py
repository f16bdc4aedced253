"""The cluster watcher's job scan: a line per job every poll, a job's whole record only when needed.

The watcher (and the liveness process, and each node agent) used to list every job's whole record
on every poll: `squeue --json` is 54-115 MB at 20,000 queued jobs and 1.2-2.8 s of goodput's CPU
to read (`python -m benchmarks scan-cost`), every 2 s, and past 64 MB the command runner cuts it
off. What a scan compares is small: each job's state, restart count and nodes, which Slurm prints
as one text line per job with no field a job can write (`Scheduler.list_job_statuses`). A job's
record (its comment, which says whether goodput may watch it; its exit code; its output paths)
is needed only

* once per job, when it is first seen out of the queue (a pending job needs nothing yet);
* when a job goodput watches ends, for the exit code and reason its anomaly reports;
* now and then for every job, because an owner may change a comment at any time (opting in or
  out while the job runs): every `REFRESH_EVERY_S`.

Where more records are needed than a few single reads cost, the scan reads them all at once as
before. A job whose record is not read yet (more new jobs than one scan reads) is left out of the
scan, as if not yet seen, so a later scan finds it new and nothing about it is lost. Where every
record at once cannot be had (past the command runner's 64 MB: about 11,000 jobs in Slurm 24.11's
JSON), the scan goes on with single reads alone and tries the whole read again a refresh later.

Pure: `plan` says what to read, `assemble` builds the scan from what was read; the adapter that
does the reading is activities/adapters/job_scan.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from goodput.models import Frozen
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo, JobState, JobStatus

REFRESH_EVERY_S = 60.0
"""How often every job's record is read again: how late a comment changed while a job runs
(opting in or out) is seen. A comment set at submission is read when the job first runs."""
MAX_SINGLE_READS = 16
"""Records a scan reads one by one; past this it reads every record at once (`list_jobs`)."""
MAX_BACKLOG = 64
"""New jobs left for later scans beyond which one read of every record is the cheaper way."""


class KnownJob(Frozen):
    """What a scan kept of a job: its state and restart count when last seen, and its whole
    record if goodput may watch it (None: it may not)."""

    state: JobState
    restart_count: int
    record: JobInfo | None = None


class ScanPlan(Frozen):
    """What to read this scan: every record at once, or these jobs' records one by one (the new
    jobs past them wait for a later scan and are left out of this one)."""

    read_all: bool = False
    reads: tuple[str, ...] = ()


class JobScan(Frozen):
    """One scan: the jobs as the watcher compares them, and the ones goodput may watch, whole."""

    jobs: tuple[JobInfo, ...] = ()
    watched: dict[str, JobInfo] = {}
    read_all: bool = False


def _ended(state: JobState) -> bool:
    return state not in ACTIVE_JOB_STATES


def plan(statuses: Sequence[JobStatus], known: Mapping[str, KnownJob], *, refresh_due: bool,
         max_reads: int = MAX_SINGLE_READS, max_backlog: int = MAX_BACKLOG, whole: bool = True) -> ScanPlan:
    """Which records this scan must read, given the jobs' lines and what earlier scans kept.
    `whole=False`: every record at once is not to be had (the read failed), so only single reads,
    the rest left for later scans."""
    if refresh_due and whole:
        if len(statuses) <= max_reads:
            return ScanPlan(reads=tuple(s.job_id for s in statuses))
        return ScanPlan(read_all=True)
    ending: list[str] = []
    new: list[JobStatus] = []
    for line in statuses:
        before = known.get(line.job_id)
        status = _settled(before, line)
        if before is None:
            if status.state is not JobState.PENDING:
                new.append(status)
        elif before.record is not None and _ended(status.state) and _moved(before, status):
            ending.append(status.job_id)
    if whole and (len(ending) > max_reads or len(new) > max_backlog):
        return ScanPlan(read_all=True)
    # ended jobs first (their anomaly waits on the record), then the running ones (their log watcher)
    new.sort(key=lambda s: (not _ended(s.state), int(s.job_id) if s.job_id.isdigit() else 0))
    waiting = [*ending, *(s.job_id for s in new)]  # an ending left unread is read as new next time
    return ScanPlan(reads=tuple(waiting[:max_reads]))


def _settled(before: KnownJob | None, line: JobStatus) -> JobStatus:
    """The line's state, except a COMPLETING line of an attempt already known to have ended: from
    23.02 a JSON record gives its state as a list, base state first (`["PENDING", "COMPLETING"]` in
    the 24.11 lab's recording), so a record read while the job's processes end says FAILED where
    the text line says COMPLETING, and the job must not seem to end twice."""
    if (before is not None and line.state is JobState.COMPLETING and _ended(before.state)
            and before.restart_count == line.restart_count):
        return line.model_copy(update={"state": before.state})
    return line


def _moved(before: KnownJob, status: JobStatus) -> bool:
    return before.state != status.state or before.restart_count != status.restart_count


def _overlaid(record: JobInfo, status: JobStatus) -> JobInfo:
    """A kept record with the state its line says now (a reason of an earlier state is dropped)."""
    reason = record.state_reason if record.state == status.state else ""
    return record.model_copy(update={"state": status.state, "restart_count": status.restart_count,
                                     "nodes": status.nodes, "state_reason": reason})


def _known(job: JobInfo, admits: Callable[[JobInfo], bool]) -> KnownJob:
    return KnownJob(state=job.state, restart_count=job.restart_count, record=job if admits(job) else None)


def assemble(statuses: Sequence[JobStatus], known: Mapping[str, KnownJob], read: Mapping[str, JobInfo],
             admits: Callable[[JobInfo], bool]) -> tuple[JobScan, dict[str, KnownJob]]:
    """The scan from the lines, the records read for it and what earlier scans kept; and what to
    keep for the next. A job neither known nor read (deferred, pending, or gone before its read)
    is left out."""
    jobs: list[JobInfo] = []
    watched: dict[str, JobInfo] = {}
    kept: dict[str, KnownJob] = {}
    for line in statuses:
        record = read.get(line.job_id)
        before = known.get(line.job_id)
        status = _settled(before, line)
        if record is not None:
            entry, job = _known(record, admits), record
        elif before is None or (before.record is not None and _moved(before, status) and _ended(status.state)):
            continue  # never read, or a watched job's ending whose record (its exit code) could not be read
        else:
            entry = before.model_copy(update={"state": status.state, "restart_count": status.restart_count})
            job = (_overlaid(before.record, status) if before.record is not None
                   else JobInfo(job_id=status.job_id, state=status.state, restart_count=status.restart_count,
                                nodes=status.nodes, partition=status.partition))
        kept[status.job_id] = entry
        jobs.append(job)
        if entry.record is not None:
            watched[job.job_id] = job
    return JobScan(jobs=tuple(jobs), watched=watched), kept


def assemble_all(records: Sequence[JobInfo], admits: Callable[[JobInfo], bool]) -> tuple[JobScan, dict[str, KnownJob]]:
    """The scan from every job's whole record (`list_jobs`), and what to keep for the next."""
    kept = {job.job_id: _known(job, admits) for job in records}
    watched = {job.job_id: job for job in records if kept[job.job_id].record is not None}
    return JobScan(jobs=tuple(records), watched=watched, read_all=True), kept
