"""A recovery's grant to the hot-spare pool ends with the recovery (issue #26).

Restarting a job into the pool means adding its owner to the reservation's users (Slurm admits
only listed users), and Slurm has no per-job grant. Left there, the owner could submit into the
spares at will, bought with one forged fault line in their own job. So the workflow asks, before
the first resume, whether the owner was listed already (the operator's list: not ours to take),
and if not, removes them once the recovery is over, whichever way it ended. The question is its
own activity, answered before any grant, so a retried resume cannot mistake goodput's own grant
for the operator's. A base class of RecoveryWorkflow, like workflows.node_link.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from goodput.recover.spares import GrantEnded, PoolAccess, SpareGrant, SparePolicy
    from goodput.scheduler import JobInfo
    from workflows.recovery_steps import STEP_RETRY, STEP_TIMEOUT, RecoverySteps


class SpareGrants(RecoverySteps):
    _spare_grants: dict[str, SpareGrant]

    async def _before_pool(self, spares: SparePolicy, job: JobInfo | None) -> None:
        """Remember, for the end, that the owner is goodput's to remove: not listed before we let them in."""
        if job is None or not spares.applies_to(job.partition) or not job.user or spares.reservation in (
                self._spare_grants) or not workflow.patched("spare-grants-end-with-the-recovery"):
            return
        grant = SpareGrant(pool=spares.reservation, user=job.user)
        access = await self._step("pool_access", grant, PoolAccess)
        if not access.listed:
            self._spare_grants[grant.pool] = grant

    async def _end_spare_grants(self) -> None:
        """Not `_step`: this must run after an operator's cancel too, which cancels steps in flight."""
        grants, self._spare_grants = sorted(self._spare_grants.values(), key=lambda g: g.pool), {}
        for grant in grants:
            try:
                ended = await workflow.execute_activity("end_spare_grant", grant, result_type=GrantEnded,
                                                        start_to_close_timeout=STEP_TIMEOUT, retry_policy=STEP_RETRY)
            except ActivityError as err:
                self._done(f"could not end {grant.user}'s access to pool {grant.pool} ({err.cause or err}): "
                           f"scontrol update ReservationName={grant.pool} Users-={grant.user}")
                continue
            if ended.changed:
                self._done(f"{grant.user}'s access to pool {grant.pool} ended with the recovery")
            elif ended.detail.startswith("could not"):
                self._done(ended.detail)
