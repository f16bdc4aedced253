"""A straggler is slow, not dead: its node is excluded at the job's next restart, not now.

A straggler verdict names a node while the job still runs, only slower. Requeueing at once throws
away the work since the job's checkpoint, which costs more than the slowdown unless the slowdown
is large. And Slurm cannot change a running job's ExcNodeList. So by default the plan keeps the
job running and records a *pending exclusion*: the node goes into the job's ExcNodeList the next
time goodput requeues or resubmits that job, whatever the reason. The node is marked suspect in
the cluster's node memory (a second job's verdict, or the site's probe, drains it: the rules of
goodput.recover.corroboration are unchanged), and the case for acting is the step time the job
loses per hour (goodput.detect.straggler_case).

`[policy.straggler]` lets a site restart now instead (`restart = "now"`), optionally only when the
job loses at least `restart_min_lost_s_per_h` per hour, or at the job's next saved checkpoint
(`restart = "next-checkpoint"`: the incident looks for a newer checkpoint while it follows the job,
and requeues off the node once there is one, losing almost no work). Pure: the workflow asks `pends` whether
a plan pends, `pending_plan` for the plan, and reads the pending nodes back from the node memory's
verdict (goodput.diagnose.node_memory: the job's own observations only).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pydantic import Field

from goodput.checkpoints import Checkpoint
from goodput.diagnose.node_memory import MAX_PENDING
from goodput.models import ActionKind, Anomaly, AnomalyKind, Attribution, Category, Frozen, RecoveryAction, RecoveryPlan
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo, JobState

# Endings that are no failure of the job: it finished, its owner cancelled it, or the scheduler's
# policy ended it. A straggler verdict alone never restarts such a job (it did before pending
# exclusions); the exclusion still pends for the job's next restart.
ENDED_NOT_FAILED = frozenset({JobState.COMPLETED, JobState.CANCELLED, JobState.TIMEOUT, JobState.PREEMPTED,
                              JobState.DEADLINE})


class StragglerRestart(StrEnum):
    NEVER = "never"  # keep the job running; exclude the node at its next restart
    NEXT_CHECKPOINT = "next-checkpoint"  # as never, and requeue off the node once a newer checkpoint is saved
    NOW = "now"  # requeue off the node at once (the behaviour before pending exclusions)


class StragglerPolicy(Frozen):
    """`[policy.straggler]`: what a straggler named while its job runs does to the job."""

    restart: StragglerRestart = StragglerRestart.NEVER
    # With `restart = "now"`: restart only when the job loses at least this many seconds of step
    # time per hour (a rank 20 % slow: 720); below it the exclusion pends. 0: always restart.
    restart_min_lost_s_per_h: float = Field(default=0.0, ge=0.0, le=1_000_000.0)
    # How long the incident follows the still-running job after its latest evidence, so that the
    # job's later failure of the same attempt is acted on (with the node excluded); the pending
    # exclusion itself stays in node memory for the memory's window.
    follow_s: float = Field(default=24 * 3600.0, ge=0.0, le=7 * 24 * 3600.0)
    # With `restart = "next-checkpoint"`: how often the incident looks for a checkpoint newer than
    # the one there was when the exclusion pended (the `find_checkpoint` step).
    checkpoint_poll_s: float = Field(default=300.0, ge=0.1, le=3600.0)


def newer_checkpoint(before: Checkpoint | None, found: Checkpoint | None) -> bool:
    """Whether `found` (the newest valid checkpoint now) was saved after `before` (the newest when
    the exclusion pended): a whole checkpoint of a later step."""
    return found is not None and found.complete and (before is None or found.step > before.step)


def lost_per_hour(anomalies: Sequence[Anomaly]) -> float | None:
    """The most step time per hour any of the incident's straggler anomalies says the job loses."""
    found = [a.lost_s_per_h for a in anomalies if a.kind is AnomalyKind.STRAGGLER and a.lost_s_per_h is not None]
    return max(found) if found else None


def pends(attribution: Attribution, job: JobInfo | None, policy: StragglerPolicy, lost: float | None,
          *, saved: bool = False) -> bool:
    """Whether the plan for `attribution` restarts nothing and pends the exclusion: a straggler on
    a job that still runs, unless the site restarts now (above its threshold), or on a job that
    ended without failing (a straggler that ended in a failure restarts off the node)."""
    if attribution.category is not Category.STRAGGLER or job is None:
        return False
    if job.state in ENDED_NOT_FAILED:
        return True
    if job.state not in ACTIVE_JOB_STATES:
        return False
    if policy.restart is StragglerRestart.NEXT_CHECKPOINT:
        return not saved  # `saved`: the job saved a newer checkpoint since the exclusion pended
    if policy.restart is StragglerRestart.NOW:
        return lost is not None and lost < policy.restart_min_lost_s_per_h
    return True


def pending_nodes(attribution: Attribution, job: JobInfo) -> tuple[str, ...]:
    """The straggler's nodes to exclude at the next restart: only nodes Slurm placed this job on,
    and only when attribution would isolate them (a straggler without a host names none)."""
    if not attribution.drain:
        return ()
    return tuple(n for n in dict.fromkeys(attribution.culprit_nodes) if n in job.nodes)[:MAX_PENDING]


def _cost(lost: float | None) -> str:
    return f": it costs {lost:.0f} s of step time per hour" if lost is not None else ""


def pending_note(nodes: Sequence[str], lost: float | None) -> str:
    """What the incident's timeline says once the exclusion is recorded."""
    return f"{', '.join(nodes)} will be excluded at the job's next restart{_cost(lost)}"


def pending_plan(attribution: Attribution, job: JobInfo, drain: tuple[str, ...], suspects: tuple[str, ...],
                 lost: float | None) -> RecoveryPlan:
    """The plan that keeps the job running: drain what corroboration allows (a drain lets the
    running job finish), record the exclusion for the next restart, notify. Never a stop: a
    straggler without a node is reported only (a restart could land on the same slow node)."""
    named = (*drain, *suspects, *pending_nodes(attribution, job))
    pending = tuple(n for n in dict.fromkeys(named) if n in job.nodes)[:MAX_PENDING]
    actions: list[RecoveryAction] = []
    if drain:
        actions.append(RecoveryAction(kind=ActionKind.DRAIN_NODES, nodes=drain,
                                      reason=attribution.explanation or attribution.category))
    actions.append(RecoveryAction(kind=ActionKind.NOTIFY, reason=attribution.explanation))
    if pending:
        drained = f"drain {', '.join(drain)} (a drain lets running jobs finish); " if drain else ""
        rationale = (f"{attribution.category}: {drained}"
                     f"exclude {', '.join(pending)} at the job's next restart{_cost(lost)}; {_meanwhile(job)}")
    else:
        rationale = f"{attribution.category}: no node to exclude; reported only, {_meanwhile(job)}"
    return RecoveryPlan(actions=tuple(actions), rationale=rationale, suspect_nodes=suspects,
                        pending_exclusion=pending)


def _meanwhile(job: JobInfo) -> str:
    if job.state in ACTIVE_JOB_STATES:
        return "the job keeps running until then"
    return f"the job ended {job.state}, no failure a straggler restarts"


def with_pending(plan: RecoveryPlan, pending: Sequence[str]) -> RecoveryPlan:
    """A restart plan with the job's pending exclusions added to its requeue's or resubmit's
    ExcNodeList (an earlier straggler verdict of this job named them)."""
    restart = (ActionKind.REQUEUE, ActionKind.RESUBMIT)
    if not pending or not any(a.kind in restart for a in plan.actions):
        return plan
    added: tuple[str, ...] = ()
    actions = []
    for action in plan.actions:
        if action.kind in restart:
            added = tuple(n for n in dict.fromkeys(pending) if n not in action.exclude)
            action = action.model_copy(update={"exclude": (*action.exclude, *added)})
        actions.append(action)
    if not added:
        return plan
    why = f"{plan.rationale}; excluding {', '.join(added)}, pending from this job's straggler verdict"
    return plan.model_copy(update={"actions": tuple(actions), "rationale": why})
