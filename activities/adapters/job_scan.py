"""Reads the jobs for a scan the way goodput.detect.job_scan plans it: a line per job every time,
records only where needed. One per watcher, liveness process or node agent; it keeps between scans
only what the plan needs, in memory (a retried activity starts with a read of every record)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Sequence

from goodput.detect.job_scan import (
    MAX_BACKLOG,
    MAX_SINGLE_READS,
    REFRESH_EVERY_S,
    JobScan,
    KnownJob,
    assemble,
    assemble_all,
    plan,
)
from goodput.scheduler import JobInfo, JobState, Scheduler, SchedulerError, UnknownJobError

log = logging.getLogger("goodput.watch")
_CONCURRENT_READS = 4

MAX_OWNER_READS = 64
"""An owner's jobs read one by one (`owners_jobs`); past this, every job's record at once is cheaper."""


class JobScanner:
    """`scan()` lists the jobs (on `node`, when given) and reads the records its plan asks for."""

    def __init__(self, scheduler: Scheduler, admits: Callable[[JobInfo], bool], *, node: str = "",
                 refresh_every_s: float = REFRESH_EVERY_S, max_reads: int = MAX_SINGLE_READS,
                 max_backlog: int = MAX_BACKLOG, clock: Callable[[], float] = time.monotonic) -> None:
        self._scheduler = scheduler
        self._admits = admits
        self._node = node
        self._refresh_every_s = refresh_every_s
        self._max_reads = max_reads
        self._max_backlog = max_backlog
        self._clock = clock
        self._known: dict[str, KnownJob] = {}
        self._refreshed_at: float | None = None
        self.whole_read_failures = 0

    async def scan(self) -> JobScan:
        """The jobs now; SchedulerError as the scheduler raised it (what was kept stays as it was)."""
        started = self._clock()
        due = self._refreshed_at is None or started - self._refreshed_at >= self._refresh_every_s
        statuses = await self._scheduler.list_job_statuses(self._node)
        todo = plan(statuses, self._known, refresh_due=due, max_reads=self._max_reads,
                    max_backlog=self._max_backlog)
        records = await self._read_all() if todo.read_all else None
        if records is not None:
            found, self._known = assemble_all(records, self._admits)
        else:
            if todo.read_all:  # not to be had: a scan of lines and single reads, the rest later
                todo = plan(statuses, self._known, refresh_due=due, max_reads=self._max_reads, whole=False)
            found, self._known = assemble(statuses, self._known, await read_jobs(self._scheduler, todo.reads),
                                          self._admits)
        if due:
            self._refreshed_at = started
        return found

    async def _read_all(self) -> Sequence[JobInfo] | None:
        """Every record (this node's only, for a node's scan); None when the read failed, cut off
        past the runner's bound at a large cluster's size or refused: the scan goes on without it."""
        try:
            records = await self._scheduler.list_jobs()
        except SchedulerError as err:
            self.whole_read_failures += 1
            log.warning("reading every job's record failed (%s); scanning the jobs' lines and reading records one "
                        "by one, every record again in %g s", err, self._refresh_every_s)
            return None
        return [job for job in records if self._node in job.nodes] if self._node else records


async def read_jobs(scheduler: Scheduler, job_ids: Sequence[str]) -> dict[str, JobInfo]:
    """The records of `job_ids` that Slurm still knows, a few reads at a time, in the order asked,
    each under the id it was asked by (an array task's or het component's record may name itself
    otherwise)."""
    gate = asyncio.Semaphore(_CONCURRENT_READS)

    async def one(job_id: str) -> JobInfo | None:
        async with gate:
            try:
                return await scheduler.get_job(job_id)
            except UnknownJobError:  # ended and forgotten since its line: the next scan will not list it
                return None

    records = await asyncio.gather(*(one(job_id) for job_id in job_ids))
    return {job_id: job for job_id, job in zip(job_ids, records, strict=True) if job is not None}


async def owners_jobs(scheduler: Scheduler, job: JobInfo, states: Collection[JobState]) -> Sequence[JobInfo]:
    """The records among which the owner's other jobs in `states` are: those jobs, read from the
    owner's job lines and then one by one, not every job of the cluster (#29; the owner's are the
    only ones goodput changes or takes for its own). Every record when the owner is not known or
    has more such jobs than a few reads cost; callers keep their own checks of owner and state."""
    if job.user_id is None:
        return await scheduler.list_jobs()
    wanted = [line.job_id for line in await scheduler.list_job_statuses(user_id=job.user_id)
              if line.state in states and line.job_id != job.job_id]
    if len(wanted) > MAX_OWNER_READS:
        return await scheduler.list_jobs()
    return list((await read_jobs(scheduler, wanted)).values())
