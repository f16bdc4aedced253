"""Job chains at the moment goodput replaces or stops a job: successors re-pointed or held.

Thin: the decisions are goodput.slurm.dependencies' (which queued jobs wait on this one, owned by
the same user, and what their dependency becomes); this runs them through the Scheduler and
says in one line what happened, for the incident's timeline. A successor that cannot be changed
for good (a backend without the operation, a job not opted in to holds) is reported, not fatal:
the job's own recovery must not fail over its successors. A transient error propagates, and the
activity's retry recomputes the plan from the queue, so nothing is done twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from activities.adapters.job_scan import read_jobs
from goodput.scheduler import JobInfo, JobState, PermanentSchedulerError, Scheduler
from goodput.slurm.dependencies import ChainPlan, repoint_plan, successors_to_hold

MAX_QUEUED_READS = 64
"""The owner's queued jobs read one by one for a chain; past this, every job's record at once."""


async def owners_queue(scheduler: Scheduler, job: JobInfo) -> Sequence[JobInfo]:
    """The records a chain's successors can be among: the job owner's queued jobs, from the owner's
    job lines, not every job of the cluster (#29; the owner's are the only ones goodput changes).
    Every record when the owner is not known or has more queued jobs than a few reads cost."""
    if job.user_id is None:
        return await scheduler.list_jobs()
    queued = [line.job_id for line in await scheduler.list_job_statuses(user_id=job.user_id)
              if line.state is JobState.PENDING and line.job_id != job.job_id]
    if len(queued) > MAX_QUEUED_READS:
        return await scheduler.list_jobs()
    return list((await read_jobs(scheduler, queued)).values())


async def repoint_successors(scheduler: Scheduler, original: JobInfo, new_job_id: str) -> str:
    plan = repoint_plan(await owners_queue(scheduler, original), original, new_job_id)
    done: list[str] = []
    failed: list[str] = []
    for update in plan.updates:
        try:
            await scheduler.update_dependency(update.job_id, update.dependency)
            done.append(f"{update.job_id} ({update.dependency})")
        except PermanentSchedulerError as err:
            failed.append(f"{update.job_id}: {err}")
    return _line(f"re-pointed successor(s) to {new_job_id}", done, failed, plan)


async def hold_successors(scheduler: Scheduler, stopped: JobInfo) -> str:
    plan = successors_to_hold(await owners_queue(scheduler, stopped), stopped)
    done: list[str] = []
    failed: list[str] = []
    for update in plan.updates:
        try:
            await scheduler.hold_job(update.job_id)
            done.append(f"{update.job_id} ({update.dependency})")
        except PermanentSchedulerError as err:
            failed.append(f"{update.job_id}: {err}")
    return _line(f"held successor(s) of stopped job {stopped.job_id} (they would only fail the same way; "
                 "release them with `scontrol release` once fixed)", done, failed, plan)


def _line(what: str, done: list[str], failed: list[str], plan: ChainPlan) -> str:
    parts = []
    if done:
        parts.append(f"{what}: {', '.join(done)}")
    if failed:
        parts.append(f"could not change: {'; '.join(failed)}")
    if plan.skipped:
        parts.append(f"left alone: {'; '.join(plan.skipped)}")
    return "; ".join(parts)[:1500]
