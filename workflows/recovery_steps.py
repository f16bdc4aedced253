"""How one step of a recovery runs, and the face the workflow shows its step functions.

RecoveryWorkflow (workflows.recovery) decides what happens to an incident and is the only code
that changes its state (goodput.recover.recovery_state). The steps that take more than a few
lines (isolating nodes: workflows.node_link; resuming: workflows.recovery_actions; following the
job: workflows.recovery_follow; the spare pool: workflows.spares; the mode gate:
workflows.recovery_gate) are plain async functions
that receive the workflow as an `Incident`: they read its state, run activities through it and
ask it to record and move, and hand back what they found. This module holds what they share: an
activity run so that an operator's cancel cancels it in flight, a failure turned into an
escalation with its reason, a local step retried by the workflow itself so that the incident
can say what it waits for, and waiting on a condition with a timeout.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from goodput.checkpoints import Checkpoint, LostWork
    from goodput.diagnose.node_memory import MemoryVerdict
    from goodput.models import Mode, RecoveryPlan
    from goodput.recover.audit import AuditAction
    from goodput.recover.incident import AttributeResult, RecoveryStart, WaitingStep
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.node_incident import LinkAnswer
    from goodput.recover.policy import Policy
    from goodput.recover.recovery_state import RecoveryState
    from goodput.recover.spares import SpareGrant
    from goodput.recover.trust import RuleAutonomy

T = TypeVar("T")

STEP_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                         maximum_interval=timedelta(seconds=30), maximum_attempts=10)
STEP_TIMEOUT = timedelta(seconds=120)
# Fast lookups that touch no other workflow (a query that is usually "never started", a directory
# listing, a file append): run as local activities on the straight path (workflow.patched
# "straight-path"). Node memory and the track record stay activities: they wait on another
# workflow's task, which a held workflow task slot could starve in a storm.
LOCAL_STEPS = frozenset({"consult_kill_switch", "find_checkpoint"})
# Under "fewer-steps" attribution too (#29): one `scontrol show job` and a read of the job's log,
# waiting on no workflow, so its slot is held only for that; it saves a workflow task per incident.
FEWER_LOCAL_STEPS = LOCAL_STEPS | {"attribute"}
HEARTBEAT_TIMEOUT = timedelta(seconds=5)
# A local activity's attempts are not among the run's pending activities, which is where an
# operator reads what a running incident waits for (`goodput incident`, the console). Under
# `workflow.patched("local-step-retries")` the workflow runs each attempt of a local step itself,
# with STEP_RETRY's backoff as its own timers, and keeps the step's attempt and last failure in the
# incident between them (#29; run_local_step).
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
# What a local step reports while the workflow retries it: (step, what it waits for; None: nothing).
Shown = Callable[[str, WaitingStep | None], None]


# Patches that code asks right after a local step may resolve. When a local step outlives its
# workflow task's deadline (a loaded worker), the worker completes that task with the step's
# marker and runs the code after it in the next task; a replay resolves the step from its marker
# and runs that code in the same task. A patch asked there is then looked for in another task than
# the one that recorded it, and the replay fails (Nondeterminism). Incidents that record
# "patches-asked-first" at their start take these as given instead.
PATCHES_ASKED_FIRST = ("hang-stack-capture", "liveness-queue", "operator-word-corroborates",
                       "straggler-pends-exclusion", "release-expedited-hold", "local-step-retries")


def runs_local(name: str, *, straight: bool, fewer: bool) -> bool:
    """Whether step `name` runs as a local activity on the incident's path."""
    return name in (FEWER_LOCAL_STEPS if fewer else LOCAL_STEPS if straight else ())


class Escalation(Exception):
    """A step failed for good; the incident goes to a person with the reason."""


class CancelledByOperator(Exception):
    """An operator cancelled while a step was in flight; the step was cancelled too."""


async def run_step(name: str, arg: object, result_type: type[T], cancel_requested: Callable[[], bool],
                   timeout: timedelta = STEP_TIMEOUT, *, local: bool = False, shown: Shown | None = None,
                   patches_first: bool = False) -> T:
    """Run one activity; an operator's cancel cancels it in flight (activities heartbeat). A
    `local` one runs in the worker inside the workflow task that asked for it: no task of its own,
    one marker in the history instead of three events and a workflow task more; with `shown`, its
    retries are the workflow's own and each is shown (run_local_step)."""
    if local and shown is not None:
        return await run_local_step(name, arg, result_type, cancel_requested, timeout, shown,
                                    patches_first=patches_first)
    handle = (workflow.start_local_activity(name, arg, result_type=result_type, start_to_close_timeout=timeout,
                                            retry_policy=STEP_RETRY) if local else
              workflow.start_activity(name, arg, result_type=result_type, start_to_close_timeout=timeout,
                                      heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_policy=STEP_RETRY))
    await workflow.wait_condition(lambda: handle.done() or cancel_requested())
    if not handle.done() and name != "notify":
        handle.cancel()
    try:
        result: T = await handle
        return result
    except ActivityError as err:
        if cancel_requested():
            raise CancelledByOperator from err
        cause = err.cause
        message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
        raise Escalation(f"step {name} failed: {message}") from err


def backoff(attempt: int, policy: RetryPolicy = STEP_RETRY) -> timedelta:
    """The wait after failed attempt `attempt` (1-based), as Temporal computes it for `policy`."""
    wait = policy.initial_interval * policy.backoff_coefficient ** (attempt - 1)
    return min(wait, policy.maximum_interval) if policy.maximum_interval else wait


def _retryable(err: FailureError) -> bool:
    return not (isinstance(err, CancelledError) or (isinstance(err, ApplicationError) and err.non_retryable))


async def _one_attempt(name: str, arg: object, result_type: type[T], cancel_requested: Callable[[], bool],
                       timeout: timedelta) -> T:
    handle = workflow.start_local_activity(name, arg, result_type=result_type, start_to_close_timeout=timeout,
                                           retry_policy=ONE_ATTEMPT)
    await workflow.wait_condition(lambda: handle.done() or cancel_requested())
    if not handle.done():
        handle.cancel()
    result: T = await handle
    return result


async def run_local_step(name: str, arg: object, result_type: type[T], cancel_requested: Callable[[], bool],
                         timeout: timedelta, shown: Shown, *, policy: RetryPolicy = STEP_RETRY,
                         patches_first: bool = False) -> T:
    """A local step, one attempt per local activity, retried here with STEP_RETRY's backoff and
    attempts; between attempts the incident shows the step, the attempt to come, the last failure
    and when (`shown`). A failure ends as `run_step`'s does: an escalation with its reason, or the
    operator's cancel. An incident recorded before `local-step-retries` let its local step's failure
    end the run, and replays so (the patch is asked at the first failure: a step that goes
    through costs no marker). `policy` is STEP_RETRY but in tests: its 10 attempts wait 151 s."""
    attempt = 1
    try:
        while True:
            try:
                return await _one_attempt(name, arg, result_type, cancel_requested, timeout)
            except FailureError as err:
                # A local activity's failure comes as its cause (no ActivityError around it).
                if not (patches_first or workflow.patched("local-step-retries")):
                    raise
                if cancel_requested():
                    raise CancelledByOperator from err
                message = err.message if isinstance(err, ApplicationError) else str(err)
                if attempt >= policy.maximum_attempts or not _retryable(err):
                    raise Escalation(f"step {name} failed: {message}") from err
                wait = backoff(attempt, policy)
                attempt += 1
                said = " ".join(message.split())[:600]
                shown(name, WaitingStep(step=name, attempt=attempt, last_failure=said,
                                        next_attempt_at=workflow.now() + wait))
                if await wait_for(cancel_requested, wait.total_seconds()):
                    raise CancelledByOperator from err
                shown(name, WaitingStep(step=name, attempt=attempt, last_failure=said))
    finally:
        shown(name, None)


async def wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Whether `condition` came true within `timeout_s` (a durable timer, replayed as such)."""
    try:
        await workflow.wait_condition(condition, timeout=timedelta(seconds=timeout_s))
    except TimeoutError:
        return False
    return True


class Incident(Protocol):
    """RecoveryWorkflow as its step functions see it. `incident` is read-only to them: every
    change goes through a method here, so the workflow class is the one writer of its state."""

    @property
    def id(self) -> str:
        """The incident id (the workflow id)."""

    @property
    def start(self) -> RecoveryStart:
        """What the incident was started with: its key, policy, mode."""

    @property
    def incident(self) -> RecoveryState:
        """The incident's state, to read."""

    @property
    def straight(self) -> bool:
        """The incident runs the straight path's fewer round trips (workflow.patched "straight-path"):
        fast lookups as local activities, one search-attribute upsert per workflow task, and the
        patches that came before it taken without their markers."""

    @property
    def fewer(self) -> bool:
        """The incident runs fewer steps to its requeue (workflow.patched "fewer-steps", #29):
        attribution as a local activity, and node memory and track record asked in one round trip."""

    @property
    def patches_first(self) -> bool:
        """The incident took PATCHES_ASKED_FIRST at its start (workflow.patched "patches-asked-first"),
        so none of them is asked right after a local step."""

    def told_early(self) -> RuleAutonomy | None:
        """Takes, once, the record's answer to the recommendation when it was told beside the node
        memory (`remembered`); None when it was not."""

    def cancel_requested(self) -> bool:
        """An operator asked to cancel (the incident may not have moved to cancelled yet)."""

    def cancelled_here(self) -> bool:
        """Moves to cancelled when asked to; True when the incident is over either way."""

    def evidence_past(self, seen: int) -> Callable[[], bool]:
        """A wait condition: more than `seen` anomalies arrived, or an operator cancelled."""

    async def step(self, name: str, arg: object, result_type: type[T], timeout: timedelta = STEP_TIMEOUT) -> T:
        """Runs one activity (run_step) under this incident's cancel."""

    async def wait(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """wait_for, as a method, so that step functions need nothing else."""

    async def attribute(self) -> AttributeResult:
        """Runs attribution on all the evidence so far."""

    def record(self, state: IncidentState, detail: str) -> None:
        """Adds a timeline event."""

    def move(self, target: IncidentState, detail: str) -> None:
        """Moves the incident (a legal transition) and records why."""

    def done(self, detail: str) -> None:
        """Records an action taken."""

    def upsert(self) -> None:
        """Updates the incident's search attributes."""

    async def notify(self, summary: str) -> None:
        """Sends a notification; a failed one is recorded, never fatal."""

    async def audited(self, action: AuditAction, nodes: tuple[str, ...], reason: str, step: Awaitable[T],
                      outcome: Callable[[T], str]) -> T:
        """Runs an action step with its audit record."""

    def attributed_again(self, attributed: AttributeResult) -> None:
        """The attribution the incident now stands on (a later one while following the job)."""

    def linked(self, node_incident_id: str) -> None:
        """This incident is part of a node incident's fault: listed and indexed once."""

    def node_answer(self, node: str) -> LinkAnswer | None:
        """Takes the node incident's answer on `node` that came by signal, if one did."""

    def checkpoint_found(self, found: Checkpoint | None, lost: LostWork | None) -> None:
        """The checkpoint the job resumes from, and the work lost since it."""

    def checkpoint_saved(self, found: Checkpoint) -> None:
        """A straggler's job saved `found` while its exclusion pended: restart off the node now."""

    def granted(self, grant: SpareGrant) -> None:
        """A grant to the hot-spare pool to end with the recovery (workflows.spares)."""

    def resumed(self, job_id: str) -> None:
        """The job id the resume produced (a resubmit's new id, or the same job's)."""

    def governed(self, mode: Mode) -> None:
        """The mode this incident now runs in (the kill switch or the rule's track record chose it)."""

    def trusted(self, rule: str) -> None:
        """The rule whose track record this incident reports to as it closes."""

    def governed_by(self, policy: Policy) -> None:
        """The policy the incident runs under from now on (the service's, asked for by a reporter)."""

    def remembered(self, memory: MemoryVerdict | None, early: RuleAutonomy | None = None) -> None:
        """The node memory's verdict the incident stands on (None: it was not asked, or did not
        answer), and the track record's answer when it was asked in the same round trip."""

    def planned(self, plan: RecoveryPlan) -> None:
        """The plan the incident carries out."""

    def approval_spent(self) -> None:
        """The plan's approval covers nothing asked after it: the next decision is awaited afresh."""

    async def approval_past_limit(self, why: str) -> None:
        """Waits for an operator to approve a drain a switch's or rack's limit refused; raises
        CancelledByOperator on a cancel and Escalation when no decision comes in time."""
