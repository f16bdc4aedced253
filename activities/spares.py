"""The hot-spare pool's effects: letting a restarted job into the pool, and refilling the pool.

The decisions are goodput.recover.spares; this module only talks to the scheduler. A pool that
cannot be used (gone, not FLEX, empty, a backend without reservations, the owner not admitted)
never fails a recovery: the job is restarted as before and the incident says why. An owner let
in for a recovery is removed again when it ends (`end_spare_grant`, workflows.spares). Every call is
idempotent (a user already allowed, a node already in the pool: changed=False), so a retried
activity only repeats what is already so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from temporalio import activity

from goodput.identifiers import InvalidIdentifierError
from goodput.recover.spares import (
    GrantEnded,
    PoolAccess,
    PoolChoice,
    RefillInput,
    RefillResult,
    SpareGrant,
    SparePolicy,
    choose_pool,
    refill_needed,
)
from goodput.scheduler import JobInfo, NodeInfo, PermanentSchedulerError, Scheduler, UnknownNodeError

# A pool is a handful of spares; a reservation listing more is read only this far (the rest is not offered).
MAX_POOL_READS = 256


async def pool_nodes(scheduler: Scheduler, names: Sequence[str]) -> list[NodeInfo]:
    """The pool's own nodes, each read by name (one batched command per tick on the CLI backend),
    never the whole cluster: at 10,000 nodes `sinfo --json` is megabytes per call (#29). A member
    Slurm no longer knows is left out; any other error is the activity's, which is retried."""
    read = await asyncio.gather(*(scheduler.get_node(n) for n in names[:MAX_POOL_READS]), return_exceptions=True)
    found: list[NodeInfo] = []
    for result in read:
        if isinstance(result, UnknownNodeError):
            continue
        if isinstance(result, BaseException):
            raise result
        found.append(result)
    return found


async def offer_pool(scheduler: Scheduler, policy: SparePolicy | None, job: JobInfo,
                     exclude: tuple[str, ...]) -> PoolChoice | None:
    """Before the restart: the pool to point the job at (its owner admitted), or why not.
    None when no pool applies to the job (nothing to say)."""
    if policy is None or not policy.applies_to(job.partition):
        return None
    name = policy.reservation
    try:
        reservation = await scheduler.get_reservation(name)
        choice = choose_pool(policy, job, reservation, await pool_nodes(scheduler, reservation.nodes), exclude)
        if choice.use and job.user not in reservation.users:
            # Slurm refuses a job in a reservation its owner may not use; only this owner is added.
            await scheduler.allow_reservation_user(name, job.user)
    except (PermanentSchedulerError, InvalidIdentifierError) as err:
        return PoolChoice(use=False, pool=name, note=f"pool {name} not used ({str(err)[:200]}): queued normally")
    return choice


async def point_at_pool(scheduler: Scheduler, job_id: str, choice: PoolChoice | None) -> str:
    """While the job is held: into the pool's reservation. The note for the resume's detail."""
    if choice is None:
        return ""
    if not choice.use:
        return f"; {choice.note}"
    try:
        await scheduler.use_reservation(job_id, choice.pool)
    except PermanentSchedulerError as err:  # released anyway, outside the pool: held forever is worse
        return f"; pool {choice.pool} not used ({str(err)[:200]}): queued normally"
    return f"; may start at once on hot spare(s) {','.join(choice.free)} of pool {choice.pool}"


def pool_fields(choice: PoolChoice | None) -> dict[str, Any]:
    """ResumeResult's spare_pool/spare_nodes: what the workflow reports once the job runs."""
    if choice is None or not choice.use:
        return {}
    return {"spare_pool": choice.pool, "spare_nodes": choice.free}


class SpareActivities:
    """The pool's refill and the recoveries' grants, registered on the worker beside the recovery steps."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def all(self) -> list[Callable[..., Awaitable[object]]]:
        return [self.refill_spares, self.pool_access, self.end_spare_grant]

    @activity.defn(name="pool_access")
    async def pool_access(self, grant: SpareGrant) -> PoolAccess:
        """Before a recovery may let the owner in: are they listed already? A pool that cannot be
        read counts as listed (no grant to end): offer_pool will not use it either."""
        try:
            reservation = await self._scheduler.get_reservation(grant.pool)
        except (PermanentSchedulerError, InvalidIdentifierError) as err:
            return PoolAccess(listed=True, detail=f"pool {grant.pool} unreadable: {str(err)[:200]}")
        return PoolAccess(listed=grant.user in reservation.users)

    @activity.defn(name="end_spare_grant")
    async def end_spare_grant(self, grant: SpareGrant) -> GrantEnded:
        """The recovery is over: the owner it let into the pool leaves it (idempotent; transient
        errors are retried, a permanent one is reported for an operator to finish by hand)."""
        try:
            done = await self._scheduler.disallow_reservation_user(grant.pool, grant.user)
        except (PermanentSchedulerError, InvalidIdentifierError) as err:
            return GrantEnded(changed=False, detail=f"could not end {grant.user}'s access to pool {grant.pool} "
                                                    f"({str(err)[:200]}): scontrol update ReservationName="
                                                    f"{grant.pool} Users-={grant.user}")
        return GrantEnded(changed=done.changed, detail=done.detail)

    @activity.defn(name="refill_spares")
    async def refill_spares(self, request: RefillInput) -> RefillResult:
        """A node back in service joins the pool while the pool is below its target size. Transient
        errors are retried; a permanent one only leaves the node in general service, and says so."""
        if not request.policy.enabled:
            return RefillResult(added=False, detail="no spare pool configured")
        try:
            reservation = await self._scheduler.get_reservation(request.policy.reservation)
            why_not = refill_needed(request.policy, reservation, request.node)
            if why_not is not None:
                return RefillResult(added=False, detail=why_not)
            done = await self._scheduler.add_reservation_nodes(reservation.name, (request.node,))
        except (PermanentSchedulerError, InvalidIdentifierError) as err:
            return RefillResult(added=False, detail=f"{request.node} not added to pool {request.policy.reservation}: "
                                                    f"{str(err)[:200]}")
        return RefillResult(added=done.changed, detail=done.detail)
