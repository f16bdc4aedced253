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

The request table lives in the process that serves the agents' heartbeats, which under the Helm
chart is not the worker running the incident. Behind `workflow.patched("liveness-queue")` the
incident first asks where that process is (`liveness_route`, goodput.detect.liveness_route) and
runs `capture_stacks` on its own task queue; with no such process it records why and goes on at
once, and a process that is gone but still listed by Temporal costs at most `LIVENESS_START_TIMEOUT`.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

with workflow.unsafe.imports_passed_through():
    from goodput.detect.liveness_route import LivenessRoute
    from goodput.detect.stack_requests import StackCaptureInput, StackCaptureResult
    from goodput.models import Category, CulpritKind
    from goodput.recover.incident import AttributeResult
    from goodput.recover.lifecycle import IncidentState
    from workflows.recovery_steps import HEARTBEAT_TIMEOUT, CancelledByOperator, Incident

# The activity's own wait is at most 90 s (liveness.stack_wait_s); this covers it and Slurm's read.
CAPTURE_TIMEOUT = timedelta(seconds=150)
CAPTURE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
# A liveness process polls continuously: one that has not taken the request by then is gone
# (Temporal lists a poller for minutes after its last poll), and waiting longer gains nothing.
LIVENESS_START_TIMEOUT = timedelta(seconds=15)
ROUTE_TIMEOUT = timedelta(seconds=15)
ROUTE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)
_NAMED = frozenset({CulpritKind.RANK, CulpritKind.NODE, CulpritKind.GPU})


def wants_stacks(attributed: AttributeResult) -> bool:
    """A hang of a job Slurm knows, with nobody named yet."""
    attribution = attributed.attribution
    return (attribution.category is Category.HANG and attributed.job is not None
            and not any(c.kind in _NAMED for c in attribution.culprits))


async def with_stacks(wf: Incident, attributed: AttributeResult) -> AttributeResult:
    """The attribution, with the odd process out as its culprit where the agents' dumps show one."""
    if not wants_stacks(attributed) or not (wf.patches_first or workflow.patched("hang-stack-capture")):
        return attributed
    assert attributed.job is not None
    request = StackCaptureInput(incident_id=wf.id, job_id=attributed.job.job_id)
    if wf.patches_first or workflow.patched("liveness-queue"):
        queue = await _liveness_queue(wf)
        if queue is None:
            return attributed
        handle = workflow.start_activity(
            "capture_stacks", request, result_type=StackCaptureResult, task_queue=queue,
            schedule_to_start_timeout=LIVENESS_START_TIMEOUT, start_to_close_timeout=CAPTURE_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=CAPTURE_RETRY)
    else:
        handle = workflow.start_activity(
            "capture_stacks", request, result_type=StackCaptureResult, start_to_close_timeout=CAPTURE_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=CAPTURE_RETRY)
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
        if isinstance(cause, TimeoutError) and cause.type is TimeoutType.SCHEDULE_TO_START:
            message = (f"no process took the request within {LIVENESS_START_TIMEOUT.total_seconds():.0f} s "
                       f"(the liveness process gone?)")
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


async def _liveness_queue(wf: Incident) -> str | None:
    """The liveness process's queue; None (recorded) when there is none or it cannot be asked."""
    try:
        route: LivenessRoute = await workflow.execute_activity(
            "liveness_route", result_type=LivenessRoute, start_to_close_timeout=ROUTE_TIMEOUT,
            retry_policy=ROUTE_RETRY)
    except ActivityError as err:
        wf.record(IncidentState.ATTRIBUTED, f"no stack dumps: cannot tell where the agents' requests go: "
                                            f"{str(err.cause or err)[:300]}")
        return None
    if route.queue is None:
        wf.record(IncidentState.ATTRIBUTED, f"no stack dumps: {route.note}")
    return route.queue
