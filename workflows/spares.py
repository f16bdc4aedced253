"""A recovery's grant to the hot-spare pool ends with the recovery (issue #26).

Restarting a job into the pool means adding its owner to the reservation's users (Slurm admits
only listed users), and Slurm has no per-job grant. Left there, the owner could submit into the
spares at will, bought with one forged fault line in their own job. So the workflow asks, before
the first resume, whether the owner was listed already (the operator's list: not ours to take),
and if not, removes them once the recovery is over, whichever way it ended. The question is its
own activity, answered before any grant, so a retried resume cannot mistake goodput's own grant
for the operator's. Step functions of RecoveryWorkflow (workflows.recovery_steps): the workflow
keeps the grants in its state.
"""

from __future__ import annotations

from collections.abc import Iterable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from goodput.recover.recovery_rules import pool_grant
    from goodput.recover.spares import GrantEnded, PoolAccess, SpareGrant, SparePolicy
    from goodput.scheduler import JobInfo
    from workflows.recovery_steps import STEP_RETRY, STEP_TIMEOUT, Incident


async def grant_to_end(wf: Incident, spares: SparePolicy, job: JobInfo | None) -> SpareGrant | None:
    """The grant goodput must take back at the end: the owner was not listed before we let them in."""
    grant = pool_grant(spares, job, wf.incident.spare_grants)
    if grant is None or not (wf.straight or workflow.patched("spare-grants-end-with-the-recovery")):
        return None
    access = await wf.step("pool_access", grant, PoolAccess)
    return None if access.listed else grant


async def end_spare_grants(wf: Incident, grants: Iterable[SpareGrant]) -> None:
    """Not `step`: this must run after an operator's cancel too, which cancels steps in flight."""
    for grant in sorted(grants, key=lambda g: g.pool):
        try:
            ended = await workflow.execute_activity("end_spare_grant", grant, result_type=GrantEnded,
                                                    start_to_close_timeout=STEP_TIMEOUT, retry_policy=STEP_RETRY)
        except ActivityError as err:
            wf.done(f"could not end {grant.user}'s access to pool {grant.pool} ({err.cause or err}): "
                    f"scontrol update ReservationName={grant.pool} Users-={grant.user}")
            continue
        if ended.changed:
            wf.done(f"{grant.user}'s access to pool {grant.pool} ended with the recovery")
        elif ended.detail.startswith("could not"):
            wf.done(ended.detail)
