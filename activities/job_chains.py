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

from activities.adapters.job_scan import owners_jobs
from goodput.scheduler import JobInfo, JobState, PermanentSchedulerError, Scheduler
from goodput.slurm.dependencies import ChainPlan, repoint_plan, successors_to_hold


async def owners_queue(scheduler: Scheduler, job: JobInfo) -> Sequence[JobInfo]:
    """The records a chain's successors can be among: the job owner's queued jobs (#29)."""
    return await owners_jobs(scheduler, job, (JobState.PENDING,))


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
