"""The decisions every backend makes before touching a node or a job, in one place.

Whether a drain is a no-op, whether a resume is ours to make, whether a job is already requeued,
held or finished: the CLI, SSH and REST backends must answer these identically (the contract
suite checks it), so they call these functions instead of each keeping a copy.
"""

from __future__ import annotations

from goodput.ownership import is_goodput_reason
from goodput.scheduler import ACTIVE_JOB_STATES, ActionResult, JobInfo, JobState, NodeInfo, NotOwnedError


def drain_noop(node: NodeInfo, reason: str) -> ActionResult | None:
    """A no-op result when the drain must not be sent; None when goodput should drain.

    Already drained with this reason: done. Drained, down or failed for any other reason
    (an admin's, Slurm's "Not responding", another goodput incident's): theirs, left alone.
    A reason on a node in service is not a claim: Slurm 24.11 keeps the last reason after
    `State=RESUME` (seen on the lab with 24.11.5: DRAIN, then RESUME, leaves IDLE with `Reason=…`;
    22.05 and 26.05 clear it), so an administrator's resumed node would otherwise never be drained
    again.
    """
    if node.drained and node.reason == reason:
        return ActionResult(changed=False, detail=f"{node.name} already drained: {reason}")
    if node.drained or (node.dead and node.reason and not is_goodput_reason(node.reason)):
        owner = "goodput" if is_goodput_reason(node.reason) else (node.reason_user or "someone else")
        return ActionResult(changed=False, detail=f"{node.name} already {node.state.lower()}"
                            f"{'+drain' if node.drained else ''} by {owner}: {node.reason}")
    return None


def resume_noop(node: NodeInfo, reason: str) -> ActionResult | None:
    """A no-op result when there is nothing to resume; raises when the drain is not goodput's
    (for exactly this reason); None when goodput should resume."""
    if not node.drained:
        return ActionResult(changed=False, detail=f"{node.name} is not drained")
    if node.reason != reason:
        raise NotOwnedError(f"{node.name} is drained for {node.reason!r}"
                            f"{f' by {node.reason_user}' if node.reason_user else ''}; "
                            "goodput will not resume it")
    return None


def is_requeued(job: JobInfo) -> bool:
    """Pending again (or still completing its requeue): another requeue would be refused."""
    return job.state in (JobState.PENDING, JobState.REQUEUED)


def hold_noop(job: JobInfo) -> ActionResult | None:
    return ActionResult(changed=False, detail=f"{job.job_id} already held") if job.held else None


def release_noop(job: JobInfo) -> ActionResult | None:
    return None if job.held else ActionResult(changed=False, detail=f"{job.job_id} is not held")


def cancel_noop(job: JobInfo) -> ActionResult | None:
    """Finished, or finishing (COMPLETING; a requeue in progress shows as REQUEUED)."""
    if job.state not in ACTIVE_JOB_STATES or job.state is JobState.COMPLETING:
        return ActionResult(changed=False, detail=f"{job.job_id} already {job.state.value.lower()}")
    return None
