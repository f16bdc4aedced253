"""The recovery workflow's decisions that need no Temporal: plain functions over its state and policy.

RecoveryWorkflow (workflows.recovery) and its step functions ask these what to do and then do it
(run the activity, move the state, record the timeline). Kept out of workflow code so each rule
is tested alone (tests/unit/test_recovery_rules.py) and the workflow reads as the order of
steps. None of these may read a clock or anything outside its arguments: the workflow replays
them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime

from goodput.checkpoints import Checkpoint, LostWork
from goodput.diagnose.node_memory import MemoryVerdict, with_memory
from goodput.models import Anomaly, Attribution, IncidentKey, Mode, RestartEffect
from goodput.recover.incident import (
    MAX_REPORTED_ANOMALIES,
    AttributeResult,
    Decision,
    DecisionVerb,
    IsolateResult,
    ResumeResult,
    VerifyInput,
)
from goodput.recover.lifecycle import IncidentState, is_terminal
from goodput.recover.node_incident import LinkAnswer, Role
from goodput.recover.policy import Policy
from goodput.recover.spares import SpareGrant, SparePolicy
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo

# -- evidence ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Room:
    """Whether a new anomaly is kept, and which kept one (by index) gives way to it first."""

    keep: bool
    evict: int | None = None


def room_for(kept: Sequence[Anomaly], set_aside: Set[str], limit: int = MAX_REPORTED_ANOMALIES) -> Room:
    """Once the evidence is full, the oldest anomaly set aside as evidence only (pushed lines that
    are not the job's own output) makes room; without one, the newest is counted, not kept, so a
    flood of forged lines cannot crowd the job's real failure out of its incident."""
    if len(kept) < limit:
        return Room(keep=True)
    oldest = next((i for i, a in enumerate(kept) if a.id in set_aside), None)
    return Room(keep=oldest is not None, evict=oldest)


def observed_at(anomalies: Sequence[Anomaly]) -> datetime | None:
    """When the failure was first observable: where the action-latency metric starts."""
    return min((a.observed_at for a in anomalies), default=None)


def link_evidence(key: IncidentKey, attributed: AttributeResult | None,
                  anomalies: Sequence[Anomaly]) -> tuple[str, ...]:
    """What a node incident is told of this job's failure: the explanation and three lines."""
    return (f"job {key.job_id}: {attributed.attribution.explanation if attributed else 'not attributed'}",
            *(line for a in anomalies[:3] for line in a.evidence[:1]))


# -- operator decisions -----------------------------------------------------------------------


def cancel_requested(decision: Decision | None) -> bool:
    return decision is not None and decision.verb is DecisionVerb.CANCEL


@dataclass(frozen=True)
class Refusal:
    """Why the `decide` update is rejected: the ApplicationError type and its message."""

    type: str
    message: str


def decide_refusal(state: IncidentState, mode: Mode, taken: Decision | None, decision: Decision) -> Refusal | None:
    """The `decide` update's validator: a closed incident, a second decision, or an approval
    with nothing to approve is refused before it enters the history."""
    if is_terminal(state):
        return Refusal("IncidentClosed", f"incident is already {state}")
    if taken is not None:
        return Refusal("AlreadyDecided", f"already decided: {taken.verb} by {taken.by.who}")
    if decision.verb is DecisionVerb.APPROVE and state is not IncidentState.AWAITING_APPROVAL \
            and mode is not Mode.APPROVE:
        return Refusal("NotAwaitingApproval", f"incident is {state} in {mode} mode; nothing to approve")
    return None


# -- acting on the job ------------------------------------------------------------------------


def ending_by_itself(attributed: AttributeResult, grace_s: float) -> JobInfo | None:
    """The job, when it asked not to be restarted and still runs (NVRx's launchers log their
    verdict, then all exit 93): it gets `grace_s` to end with its own exit code."""
    job = attributed.job
    if (attributed.attribution.restart_effect is not RestartEffect.NEVER or job is None
            or job.state not in ACTIVE_JOB_STATES or grace_s <= 0):
        return None
    return job


def follows_in_job(attribution: Attribution, policy: Policy) -> bool:
    """The plan leaves the job to its own launcher's in-job restart and the incident follows it."""
    return attribution.restart_effect is RestartEffect.IN_JOB and policy.in_job_follow_s > 0


def memory_weighed(attribution: Attribution, verdict: MemoryVerdict, job: JobInfo) -> Attribution:
    """The attribution once the cluster's node memory weighed in; its note kept when it changed nothing."""
    remembered = with_memory(attribution, verdict, job)
    if verdict.note and remembered == attribution:
        return attribution.model_copy(update={"explanation": f"{attribution.explanation}; node memory: "
                                                             f"{verdict.note}"})
    return remembered


def memory_unavailable(attribution: Attribution, why: str) -> Attribution:
    return attribution.model_copy(update={"explanation": f"{attribution.explanation}; node memory "
                                                         f"unavailable ({why})"})


def resume_environment(checkpoint: Checkpoint | None) -> dict[str, str]:
    """What the resumed job is told about the checkpoint it resumes from."""
    if checkpoint is None:
        return {}
    return {"GOODPUT_RESUME_FROM": checkpoint.path, "GOODPUT_RESUME_STEP": str(checkpoint.step)}


def lost_work_note(lost: LostWork) -> str:
    return (f"lost work: {lost.iterations} iterations, {lost.seconds:.0f} s, "
            f"{lost.gpu_hours:.2f} GPU-hours")


def verify_input(resumed: ResumeResult, job_id: str, restarts: int, policy: Policy,
                 checkpoint: Checkpoint | None) -> VerifyInput:
    """The `verify` step after a resume: running, and past the checkpoint's step when there is one."""
    return VerifyInput(
        job_id=resumed.job_id, restart_count_before=restarts,
        same_job=resumed.job_id == job_id, timeout_s=policy.verify_running_timeout_s,
        poll_interval_s=policy.verify_poll_interval_s, progress_past=checkpoint.step if checkpoint else None,
        progress_timeout_s=policy.verify_progress_timeout_s, log_offsets=resumed.log_offsets,
        capacity_wait_s=policy.capacity_wait_s)


def verify_timeout_s(policy: Policy, checkpoint: Checkpoint | None) -> float:
    """The `verify` activity's own limit: past every wait it may do, so it is never cut short."""
    return (policy.verify_running_timeout_s + 60 + policy.capacity_wait_s
            + (policy.verify_progress_timeout_s if checkpoint else 0))


def expedite_hold_note(job: JobInfo, *, restart: bool, acting: bool) -> str:
    """What the incident says about a job Slurm (25.11+) requeued itself and holds (expedited
    requeue, no epilog failed): without it an operator sees a held job and no reason."""
    why = f"job {job.job_id} is held by Slurm's expedited requeue (it failed and no epilog did)"
    if not restart:
        return f"{why}: left held, goodput's verdict is no restart (`scontrol release {job.job_id}` runs it again)"
    if acting:
        return f"{why}: released, goodput's verdict is restart"
    return f"{why}: recommended — release it (`scontrol release {job.job_id}`); the expedite starts it at once"


def pool_grant(spares: SparePolicy, job: JobInfo | None, granted: Mapping[str, SpareGrant]) -> SpareGrant | None:
    """The grant to the hot-spare pool a resume may add, when the pool applies to the job and
    this incident has not asked about it yet (workflows.spares)."""
    if job is None or not spares.applies_to(job.partition) or not job.user or spares.reservation in granted:
        return None
    return SpareGrant(pool=spares.reservation, user=job.user)


# -- isolating nodes --------------------------------------------------------------------------


def leading(answers: Mapping[str, LinkAnswer | None]) -> tuple[str, ...]:
    """The nodes this incident decides on itself: it leads their fault, or their node incident
    could not be reached."""
    return tuple(n for n, a in answers.items() if a is None or a.role is Role.LEAD)


def drained_note(isolated: IsolateResult) -> str:
    return (f"drained {', '.join(isolated.drained) or 'nothing new'}"
            + (f"; already drained: {', '.join(isolated.already)}" if isolated.already else "")
            + (f"; shared drain of fault {', '.join(isolated.faults)}" if isolated.faults else ""))
