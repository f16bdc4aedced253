"""The resume activity's two ways back: requeue in place, or resubmit a copy.

Split out of activities/recovery.py because each is a careful sequence of scheduler calls whose
order is the safety argument (hold before exclude, copy before cancel); each reads as one
function here, with the reasons beside the calls.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.job_chains import repoint_successors
from activities.metrics import RecoveryMetrics
from activities.progress import output_sizes
from activities.scheduler_calls import mapped
from activities.spares import offer_pool, point_at_pool, pool_fields
from goodput.recover.audit import AuditAction
from goodput.recover.incident import ResumeInput, ResumeResult
from goodput.recover.spares import PoolChoice
from goodput.scheduler import (
    ACTIVE_JOB_STATES,
    JobInfo,
    PermanentSchedulerError,
    ResubmitRequest,
    Scheduler,
    with_status,
)

# How old the attribute step's record of the job may be for a requeue to reuse it (#29): the
# straight path resumes seconds after attributing; an incident that waited for approval reads anew.
KNOWN_MAX_AGE_S = 60.0


async def job_now(scheduler: Scheduler, request: ResumeInput) -> JobInfo:
    """The job as the requeue decides on it: the attribute step's record with its state read now
    (one status read, batched with the tick's others), or, where that could mislead, all of it.

    Whether to requeue rests only on what the fresh status says (state, restart count, held: fields
    slurmctld writes), never on the reused record, so a requeue still happens at most once. The record
    lends only what its owner writes and the requeue does not decide on (output paths, comment,
    partition, excluded nodes), at most KNOWN_MAX_AGE_S old. It is read whole again on a retry (an
    earlier attempt may have changed the job), when the restart count or hold moved since (Slurm
    or the job requeued it, someone held it: the branches that ask why), and when Slurm's expedited
    hold was on it (a status cannot say whether it still is).
    """
    known, at = request.known, request.known_at
    if (known is not None and at is not None and known.job_id == request.job_id and not known.expedite_held
            and activity.info().attempt == 1
            and 0 <= (datetime.now(UTC) - at).total_seconds() <= KNOWN_MAX_AGE_S):
        status = await mapped(scheduler.job_status(request.job_id))
        if status.restart_count == known.restart_count and status.held == known.held:
            return with_status(known, status)
    return await mapped(scheduler.get_job(request.job_id))


async def requeue(scheduler: Scheduler, metrics: RecoveryMetrics, request: ResumeInput) -> ResumeResult:
    """Requeue the job in place (held while nodes are excluded or a spare pool is pointed at)."""
    job = await job_now(scheduler, request)
    # Sizes now, in both branches: at worst a retried activity misses the new attempt's first
    # lines (it prints more); it never counts the old attempt's steps as new progress.
    offsets = output_sizes(p for p in (job.stdout_path, job.stderr_path) if p)
    retried = job.restart_count > request.restart_count_before
    # a retry that finds the job released already leaves the pool alone
    pool = await offer_pool(scheduler, request.spares if job.held or not retried else None, job,
                            request.exclude)
    if retried:
        # Also a retry whose first attempt requeued the job held and stopped before release. Only
        # a retry's or Slurm's expedited hold: on a first attempt the hold is its owner's or an
        # admin's (`scontrol requeuehold` after the failure), and that is theirs to lift.
        ours = job.expedite_held or activity.info().attempt > 1
        excluded = (await exclude_and_release(scheduler, job, request.exclude, pool) if job.held and ours
                    else f"; held by its owner or an admin ({job.state_reason or 'held'}): not released"
                    if job.held else "")
        return ResumeResult(job_id=job.job_id, changed=False,
                            detail=f"job {job.job_id} already requeued (restarts={job.restart_count}){excluded}",
                            restart_count_before=request.restart_count_before, log_offsets=offsets,
                            **pool_fields(pool))
    if job.expedite_held:
        # Slurm requeued the failed job itself and holds it (expedited requeue, no epilog failed);
        # this step runs only when goodput's verdict is restart, so it is released, after the
        # exclusions, and the expedite starts it at once. Never for any other hold (JobInfo).
        excluded = await exclude_and_release(scheduler, job, request.exclude, pool)
        metrics.accepted(AuditAction.REQUEUE, request.observed_at)
        return ResumeResult(job_id=job.job_id, changed=True, released_expedite_hold=True,
                            detail=f"job {job.job_id} was held by Slurm's expedited requeue (no epilog failed): "
                                   f"released{excluded}",
                            restart_count_before=request.restart_count_before, log_offsets=offsets,
                            **pool_fields(pool))
    # With nodes to avoid or a spare pool: requeue held, exclude them, point it at the pool,
    # release, so the job cannot start on a node goodput distrusts (or off the pool) meanwhile.
    hold = bool(request.exclude) or (pool is not None and pool.use)
    # `job`'s state was read in this attempt, just now (job_now): not read a third time.
    result = await mapped(scheduler.requeue_job(request.job_id, hold=hold, known=job, fresh=True))
    excluded = (await exclude_and_release(scheduler, job, request.exclude, pool) if hold
                else await point_at_pool(scheduler, job.job_id, pool))
    if result.changed:
        metrics.accepted(AuditAction.REQUEUE, request.observed_at)
    return ResumeResult(job_id=request.job_id, changed=result.changed, detail=result.detail + excluded,
                        restart_count_before=request.restart_count_before, log_offsets=offsets,
                        **pool_fields(pool))

async def exclude_and_release(scheduler: Scheduler, job: JobInfo, exclude: tuple[str, ...],
                              pool: PoolChoice | None) -> str:
    """Exclude the distrusted nodes and point at the pool, then release the held job."""
    note = ""
    if exclude:
        try:
            done = await scheduler.exclude_nodes(job.job_id, exclude, known=job)
            note = f"; {done.detail}"
        except PermanentSchedulerError as err:  # released anyway: held forever is worse
            note = f"; could not exclude {', '.join(exclude)}: {err}"
    note += await point_at_pool(scheduler, job.job_id, pool)
    await mapped(scheduler.release_job(job.job_id, known=job))
    return note

async def resubmit(scheduler: Scheduler, metrics: RecoveryMetrics, request: ResumeInput) -> ResumeResult:
    """Copy first (held), cancel the original, then release the copy.

    Backends keep resubmission idempotent themselves: a retried call returns the copy it made,
    recognised by owner and an unforgeable token, so a hostile job claiming to be the copy
    cannot turn it into a no-op. Submitting the held copy before cancelling means that when
    the copy cannot be made (its owner has no account here, goodput may not become them),
    the activity fails with the original still running: nothing is lost.
    """
    original = await mapped(scheduler.get_job(request.job_id))
    offsets = output_sizes(p for p in (original.stdout_path, original.stderr_path) if p)
    if (original.restart_count > request.restart_count_before and original.state in ACTIVE_JOB_STATES
            and not original.expedite_held):
        # The job restarted itself since the failure (submitit's signal handler, a
        # `scontrol requeue` in its own script): a copy now would be a second restart. Not
        # Slurm's expedited requeue: that one holds the job, it would never run.
        return ResumeResult(job_id=original.job_id, changed=False,
                            restart_count_before=request.restart_count_before,
                            detail=f"job {original.job_id} requeued itself since the failure "
                                   f"(restarts={original.restart_count}): not restarted a second time",
                            log_offsets=offsets)
    # Two copies of one training run would fight over the same checkpoints: hold the copy
    # while the original still runs.
    active = original.state in ACTIVE_JOB_STATES
    pool = await offer_pool(scheduler, request.spares, original, request.exclude)
    result = await mapped(scheduler.resubmit_job(request.job_id, ResubmitRequest(
        exclude=request.exclude, environment=request.environment, hold=active or bool(pool and pool.use),
        incident_id=request.incident_id)))
    if not result.new_job_id:
        raise ApplicationError(f"resubmit of {request.job_id} returned no job id", non_retryable=True)
    # Before the original goes: cancelling it would start an `afterany` successor at once.
    chain = await repoint_successors(scheduler, original, result.new_job_id)
    if active:
        await mapped(scheduler.cancel_job(request.job_id))
    if result.changed or (await mapped(scheduler.get_job(result.new_job_id))).held:
        chain += await point_at_pool(scheduler, result.new_job_id, pool)  # into the pool while held
    # Also after a retry that found a copy an earlier attempt held; a no-op when not held.
    await mapped(scheduler.release_job(result.new_job_id))
    # Accepted once the copy is submitted, the original cancelled and the copy released;
    # counted by the call that made the copy (a retry that found it only finishes the job).
    if result.changed:
        metrics.accepted(AuditAction.RESUBMIT, request.observed_at)
    return ResumeResult(job_id=result.new_job_id, changed=result.changed, log_offsets=offsets,
                        detail=result.detail + (f"; {chain.removeprefix('; ')}" if chain else ""),
                        **pool_fields(pool))
