"""Recovery policy and the pure function that turns an attribution into a plan.

Deterministic by construction (no clock, no I/O, no randomness) so the workflow can call it
directly and replay it forever. The blast-radius guard lives here: a plan that would drain more
than the policy allows is replaced by an escalation, because a wrong mass-drain costs more GPU
hours than any single failure.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from goodput.diagnose.node_memory import NodeMemoryPolicy
from goodput.models import (
    ActionKind,
    Attribution,
    Category,
    Frozen,
    Mode,
    RecoveryAction,
    RecoveryPlan,
    RestartEffect,
)
from goodput.recover.breaker import BreakerPolicy
from goodput.recover.corroboration import Corroboration, ExcludeBeforeDrainPolicy
from goodput.recover.node_health import ReturnToServicePolicy
from goodput.recover.node_incident import NodeIncidentPolicy
from goodput.recover.spares import SparePolicy
from goodput.recover.straggler_plan import StragglerPolicy, StragglerRestart, pending_plan
from goodput.recover.trust import AutonomyPolicy
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo


class ResumeStrategy(StrEnum):
    REQUEUE = "requeue"
    RESUBMIT = "resubmit"


# How much each mode lets goodput do on its own; a reporter may ask for less, never for more.
LOOSENESS: dict[Mode, int] = {Mode.MONITOR: 0, Mode.APPROVE: 1, Mode.AUTONOMOUS: 2}


def governing_mode(service: Mode, requested: Mode | None) -> Mode:
    """The mode an incident runs in: the service's for its partition, or the reporter's request
    when that is stricter. Whoever reports an anomaly (the CLI, a node agent) never loosens it."""
    if requested is None or LOOSENESS[requested] >= LOOSENESS[service]:
        return service
    return requested


class Policy(Frozen):
    mode: Mode = Mode.MONITOR
    partition_modes: dict[str, Mode] = Field(default_factory=dict)
    resume: ResumeStrategy = ResumeStrategy.REQUEUE
    max_drain_nodes_per_incident: int = Field(default=2, ge=0)
    max_drain_fraction_of_job: float = Field(default=0.5, ge=0.0, le=1.0)
    restart_on_app_error: bool = False
    coalesce_window_s: float = Field(default=1.0, ge=0.0, le=300.0)
    approval_timeout_s: float = Field(default=4 * 3600.0, gt=0.0)
    verify_running_timeout_s: float = Field(default=900.0, gt=0.0)
    verify_poll_interval_s: float = Field(default=2.0, gt=0.0)
    # With a known checkpoint, the resumed job must show progress past it within this time.
    verify_progress_timeout_s: float = Field(default=900.0, gt=0.0)
    # A resumed job that Slurm holds pending for lack of healthy nodes is waited for, not failed.
    capacity_wait_s: float = Field(default=24 * 3600.0, ge=0.0)
    # For GPU-hours lost when the job's GRES does not say (lost-work accounting only).
    gpus_per_node: int = Field(default=8, ge=0)
    max_resume_attempts: int = Field(default=2, ge=1, le=20)
    breaker: BreakerPolicy = Field(default_factory=BreakerPolicy)
    # Cross-job memory of nodes: unrelated ambiguous failures on one node isolate it.
    node_memory: NodeMemoryPolicy = Field(default_factory=NodeMemoryPolicy)
    # A job that ends FAILED with one of these exit statuses asked not to be restarted: goodput
    # stops it instead (NVRx's launcher exits 93 after its attribution or no-progress verdict).
    never_restart_exit_codes: tuple[int, ...] = (93,)
    # After the job's own launcher restarted it in-job (torchrun elastic, NVRx's ft_launcher), the
    # incident follows the job this long past its latest evidence, so that the launcher giving up
    # (or its exit code 93) is acted on then; 0 closes the incident at once, as before.
    in_job_follow_s: float = Field(default=3600.0, ge=0.0, le=7 * 24 * 3600.0)
    # A job that asked not to be restarted (exit code 93, NVRx's verdict in its log) while it still
    # runs gets this long to end by itself, so that its own exit code reaches Slurm, before goodput
    # stops it; 0 stops it at once.
    never_restart_grace_s: float = Field(default=60.0, ge=0.0, le=3600.0)
    # An incident whose every anomaly is evidence only (pushed lines not shown to be the job's own
    # output) recommends, then stays open this long for evidence goodput may act on, so that such
    # lines cannot close the job attempt's one incident before its real failure arrives; 0 closes it.
    evidence_only_wait_s: float = Field(default=3600.0, ge=0.0, le=7 * 24 * 3600.0)
    # Nodes goodput drained come back after a quarantine and the site's health check.
    return_to_service: ReturnToServicePolicy = Field(default_factory=ReturnToServicePolicy)
    # One fault, many jobs: the job incidents a node's fault hit share one isolation decision.
    node_incident: NodeIncidentPolicy = Field(default_factory=NodeIncidentPolicy)
    # A closed incident keeps accepting late evidence of its job attempt this long, so the tail
    # of a burst is folded in instead of being turned away.
    linger_s: float = Field(default=30.0, ge=0.0, le=3600.0)
    # Hot spares: a restarted job starts on a node held in this reservation instead of queueing.
    spares: SparePolicy = Field(default_factory=SparePolicy)
    # Earned autonomy (goodput.recover.trust): the bar a rule's record at this site must clear before
    # it acts alone in an autonomous partition, and whether that bar applies at all.
    autonomy: AutonomyPolicy = Field(default_factory=AutonomyPolicy)
    # A drain needs a second signal from the node itself; a node only the job's log blames is
    # excluded from that job and marked suspect instead (goodput.recover.corroboration).
    exclude_before_drain: ExcludeBeforeDrainPolicy = Field(default_factory=ExcludeBeforeDrainPolicy)
    # A straggler named while its job runs: exclude its node at the job's next restart, or restart now.
    straggler: StragglerPolicy = Field(default_factory=StragglerPolicy)

    def mode_for(self, partition: str) -> Mode:
        """Sites trust goodput partition by partition; unknown partitions get the default."""
        return self.partition_modes.get(partition, self.mode)


def as_recorded(policy: Policy) -> Policy:
    """The policy as the release that recorded it meant it. A snapshot from before earned autonomy
    or exclude before drain existed carries neither key, and then both were off; their defaults
    turned on later, and a recovery in flight never changes its policy, so such a snapshot keeps
    them off; one from before pending exclusions restarts a straggler's job at once, as it did then.
    A snapshot that names them (every one written since) is returned as it is."""
    update: dict[str, object] = {}
    if "autonomy" not in policy.model_fields_set:
        update["autonomy"] = AutonomyPolicy(earned=False)
    if "exclude_before_drain" not in policy.model_fields_set:
        update["exclude_before_drain"] = ExcludeBeforeDrainPolicy(enabled=False)
    if "straggler" not in policy.model_fields_set:
        update["straggler"] = StragglerPolicy(restart=StragglerRestart.NOW)
    return policy.model_copy(update=update) if update else policy


def _corroborated(corroboration: Corroboration) -> str:
    """What the plan says about the signals it found, node by node."""
    return "; ".join([*(f"drain {n}: corroborated ({corroboration.described(n)})" for n in corroboration.drain),
                      *(f"{n} excluded from the job, not drained, marked suspect: only the job's log blames it "
                        f"(signals: {corroboration.described(n)}; a drain needs a second, independent one)"
                        for n in corroboration.suspect)])


def plan_recovery(attribution: Attribution, job: JobInfo | None, policy: Policy,
                  corroboration: Corroboration | None = None, *, keep_running: bool = False,
                  lost_s_per_h: float | None = None) -> RecoveryPlan:
    """The plan for `attribution`. With `corroboration` (exclude before drain), only its
    corroborated nodes are drained; its suspects are excluded from the resumed job alone.
    `keep_running` (a straggler on a running job, goodput.recover.straggler_plan.pends): no restart
    and no stop; the nodes are excluded at the job's next restart."""
    if keep_running and job is not None:
        return _kept_running(attribution, job, policy, corroboration, lost_s_per_h)
    handled = attribution.restart_effect in (RestartEffect.IN_JOB, RestartEffect.NEVER)
    restart = not handled and (attribution.restart or (
        attribution.category is Category.APP_ERROR and policy.restart_on_app_error))
    drain = tuple(dict.fromkeys(attribution.culprit_nodes)) if attribution.drain else ()
    suspects: tuple[str, ...] = ()
    if corroboration is not None and (corroboration.drain or corroboration.suspect):
        drain, suspects = corroboration.drain, corroboration.suspect
        plan = _plan(attribution, job, policy, drain, suspects, restart)
        why = _corroborated(corroboration)
        return plan.model_copy(update={"rationale": f"{plan.rationale} ({why})", "suspect_nodes": suspects})
    return _plan(attribution, job, policy, drain, suspects, restart)


def _kept_running(attribution: Attribution, job: JobInfo, policy: Policy, corroboration: Corroboration | None,
                  lost: float | None) -> RecoveryPlan:
    drain = tuple(dict.fromkeys(attribution.culprit_nodes)) if attribution.drain else ()
    suspects: tuple[str, ...] = ()
    if corroboration is not None and (corroboration.drain or corroboration.suspect):
        drain, suspects = corroboration.drain, corroboration.suspect
    blocked = _too_wide(drain, job, policy)
    if blocked is not None:
        return blocked
    plan = pending_plan(attribution, job, drain, suspects, lost)
    if suspects and corroboration is not None:
        return plan.model_copy(update={"rationale": f"{plan.rationale} ({_corroborated(corroboration)})"})
    return plan


def _too_wide(drain: tuple[str, ...], job: JobInfo | None, policy: Policy) -> RecoveryPlan | None:
    """The escalation that replaces a plan draining more than the blast radius allows."""
    if drain:
        limit = policy.max_drain_nodes_per_incident
        job_nodes = len(job.nodes) if job and job.nodes else 0
        too_many = len(drain) > limit
        # One bad node is the common case, whatever the job's size; the fraction guards against
        # an attribution that blames several nodes of one job at once.
        too_much = len(drain) > 1 and job_nodes > 0 and len(drain) / job_nodes > policy.max_drain_fraction_of_job
        if too_many or too_much:
            why = (f"attribution blames {len(drain)} node(s) ({', '.join(drain)}); the blast-radius "
                   f"limit allows {limit} per incident and "
                   f"{policy.max_drain_fraction_of_job:.0%} of the job's nodes: escalating to a person")
            return RecoveryPlan(actions=(RecoveryAction(kind=ActionKind.NOTIFY, reason=why),),
                                rationale=why, blocked_by_blast_radius=True)
    return None


def _plan(attribution: Attribution, job: JobInfo | None, policy: Policy, drain: tuple[str, ...],
          suspects: tuple[str, ...], restart: bool) -> RecoveryPlan:
    moved = tuple(n for n in attribution.exclude if n not in drain and n not in suspects)
    exclude = (*drain, *suspects, *moved)
    blocked = _too_wide(drain, job, policy)
    if blocked is not None:
        return blocked

    actions: list[RecoveryAction] = []
    if drain:
        actions.append(RecoveryAction(kind=ActionKind.DRAIN_NODES, nodes=drain,
                                      reason=attribution.explanation or attribution.category))
    if attribution.restart_effect is RestartEffect.IN_JOB:
        # The launcher is healing the job: stopping it would undo that, restarting would double it.
        actions.append(RecoveryAction(kind=ActionKind.NOTIFY, reason=attribution.explanation))
        rationale = (f"{attribution.category}: restarted in-job by the job's launcher; no restart, no stop"
                     + (f", after draining {', '.join(drain)}" if drain else ""))
        return RecoveryPlan(actions=tuple(actions), rationale=rationale)
    if not restart:
        if job is not None and job.state in ACTIVE_JOB_STATES:
            actions.append(RecoveryAction(kind=ActionKind.STOP_JOB, reason="no restart per policy"))
        actions.append(RecoveryAction(kind=ActionKind.NOTIFY, reason=attribution.explanation))
        rationale = (f"{attribution.category}: no restart"
                     + (f" after draining {', '.join(drain)}" if drain else "")
                     + (f" — {attribution.explanation}" if attribution.explanation else ""))
        return RecoveryPlan(actions=tuple(actions), rationale=rationale)

    if policy.resume is ResumeStrategy.RESUBMIT:
        actions.append(RecoveryAction(kind=ActionKind.RESUBMIT, exclude=exclude,
                                      reason="resubmit excluding isolated nodes"))
    else:
        actions.append(RecoveryAction(kind=ActionKind.REQUEUE, exclude=exclude,
                                      reason="requeue on healthy nodes"))
    actions.append(RecoveryAction(kind=ActionKind.NOTIFY, reason=attribution.explanation))
    verb = "resubmit" if policy.resume is ResumeStrategy.RESUBMIT else "requeue"
    rationale = (f"{attribution.category}: "
                 + (f"drain {', '.join(drain)}, then " if drain else "")
                 + (f"exclude {', '.join((*suspects, *moved))}, " if suspects or moved
                    else "" if drain else "no node blamed; ")
                 + f"{verb} the job")
    return RecoveryPlan(actions=tuple(actions), rationale=rationale)
