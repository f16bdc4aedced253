"""A hang incident with no culprit asks the node agents for stack dumps, and names the odd one out.

A hung collective says nothing about who hangs: every rank waits, one does not. When attribution
finds a hang and blames no rank, node or GPU, the incident runs `capture_stacks`
(activities.stack_requests): a request for the job's nodes as Slurm lists them, answered by the
agents over their heartbeat, waited for at most `liveness.stack_wait_s`. What each node returned
goes on the timeline; the process outside the collective, where the dumps show one, becomes the
attribution's culprit (a rank-kind culprit: a stack says where a program waits, not that hardware
failed, so nothing is drained on it). Nothing here holds the incident up past the activity's
bound or fails it: an activity that fails is one timeline line, and the incident goes on without
stacks. New behaviour, behind `workflow.patched("hang-stack-capture")`.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from goodput.detect.stack_requests import StackCaptureInput, StackCaptureResult
    from goodput.models import Category, CulpritKind
    from goodput.recover.incident import AttributeResult
    from goodput.recover.lifecycle import IncidentState
    from workflows.recovery_steps import HEARTBEAT_TIMEOUT, CancelledByOperator, Incident

# The activity's own wait is at most 90 s (liveness.stack_wait_s); this covers it and Slurm's read.
CAPTURE_TIMEOUT = timedelta(seconds=150)
CAPTURE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
_NAMED = frozenset({CulpritKind.RANK, CulpritKind.NODE, CulpritKind.GPU})


def wants_stacks(attributed: AttributeResult) -> bool:
    """A hang of a job Slurm knows, with nobody named yet."""
    attribution = attributed.attribution
    return (attribution.category is Category.HANG and attributed.job is not None
            and not any(c.kind in _NAMED for c in attribution.culprits))


async def with_stacks(wf: Incident, attributed: AttributeResult) -> AttributeResult:
    """The attribution, with the odd process out as its culprit where the agents' dumps show one."""
    if not wants_stacks(attributed) or not workflow.patched("hang-stack-capture"):
        return attributed
    assert attributed.job is not None
    handle = workflow.start_activity(
        "capture_stacks", StackCaptureInput(incident_id=wf.id, job_id=attributed.job.job_id),
        result_type=StackCaptureResult, start_to_close_timeout=CAPTURE_TIMEOUT, heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=CAPTURE_RETRY)
    await workflow.wait_condition(lambda: handle.done() or wf.cancel_requested())
    if not handle.done():
        handle.cancel()
    try:
        result = await handle
    except ActivityError as err:
        if wf.cancel_requested():
            raise CancelledByOperator from err
        cause = err.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        wf.record(IncidentState.ATTRIBUTED, f"no stack dumps: {message[:300]}")
        return attributed
    found = result.evidence
    if result.note:
        wf.record(IncidentState.ATTRIBUTED, result.note)
    if found.lines:
        wf.record(IncidentState.ATTRIBUTED, "stack dumps asked of the agents: " + "; ".join(found.lines)[:3000])
    if found.culprit is None:
        return attributed
    attribution = attributed.attribution
    named = attribution.model_copy(update={
        "culprits": (found.culprit, *attribution.culprits),
        "explanation": f"{attribution.explanation} {found.explanation}.".strip(),
        "signature_ids": (*attribution.signature_ids, "stack-odd-one-out")})
    wf.record(IncidentState.ATTRIBUTED, f"culprit from the stack dumps: {found.culprit.id}")
    return attributed.model_copy(update={"attribution": named})
