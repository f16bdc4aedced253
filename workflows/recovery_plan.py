"""One pass of an incident: stand on an attribution, plan, pass the gates, act.

RecoveryWorkflow (workflows.recovery) loops: attribute, then again while the job's launcher or
unactionable evidence keeps the incident open. Each turn of that loop is this pass: the node
memory weighs in on the attribution (with the track record in the same round trip under
`fewer-steps`: goodput.recover.consults), the pure `plan_recovery` plans, the blast radius and the
mode gate (workflows.recovery_gate) decide whether it acts, and workflows.recovery_actions carries
it out. Kept apart from the loop so that the workflow class reads as the loop and its state.
A step function (workflows.recovery_steps): every change of state goes through the workflow.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.models import AnomalySource, Attribution
    from goodput.recover.corroboration import corroborate
    from goodput.recover.incident import AttributeResult
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.policy import governing_mode, plan_recovery
    from goodput.recover.recovery_rules import follows_in_job
    from goodput.recover.straggler_plan import lost_per_hour, pends, with_pending
    from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo
    from workflows.recovery_actions import execute, mark_suspects, probe_suspects, remember
    from workflows.recovery_gate import may_act
    from workflows.recovery_steps import Escalation, Incident

S = IncidentState


async def plan_and_act(wf: Incident, attributed: AttributeResult) -> bool:
    """Plan and act once; True when the plan left the job to its own launcher's in-job
    restart and the incident goes on following the job."""
    policy = wf.start.policy
    attribution, job = await _stand_on(wf, attributed)
    corroboration = None
    if (policy.exclude_before_drain.enabled and attribution.drain
            and (wf.straight or workflow.patched("exclude-before-drain"))):
        # An operator's `goodput inject` is their word, not job output (docs/security.md)
        word = (any(a.source is AnomalySource.OPERATOR for a in wf.incident.anomalies)
                and (wf.patches_first or workflow.patched("operator-word-corroborates")))
        corroboration = corroborate(attribution, wf.incident.anomalies, wf.incident.memory, operator_word=word)
        # Lines not shown to be the job's own output may not make goodput run commands on nodes.
        if corroboration.suspect and policy.exclude_before_drain.probe_command and not attributed.evidence_only:
            probes = await probe_suspects(wf, corroboration.suspect)
            corroboration = corroborate(attribution, wf.incident.anomalies, wf.incident.memory, probes,
                                        operator_word=word)
    lost = lost_per_hour(wf.incident.anomalies)
    # A straggler on a running job keeps it running; its node is excluded at the next restart.
    saved = wf.incident.saved_since_pend is not None  # next-checkpoint: the job saved one since it pended
    keep = (pends(attribution, job, policy.straggler, lost, saved=saved)
            and (wf.patches_first or workflow.patched("straggler-pends-exclusion")))
    plan = plan_recovery(attribution, job, policy, corroboration, keep_running=keep, lost_s_per_h=lost)
    pending = _pending(wf)
    if pending and not keep and (wf.patches_first or workflow.patched("straggler-pends-exclusion")):
        plan = with_pending(plan, pending)
    wf.planned(plan)
    wf.move(S.PLANNED, plan.rationale)
    wf.upsert()
    if wf.cancelled_here():
        return False
    if plan.blocked_by_blast_radius:
        raise Escalation(plan.rationale)
    if job is None:
        raise Escalation(attributed.note or "the scheduler has no record of this job")
    if not await may_act(wf, attributed, plan):
        return False
    if plan.suspect_nodes or plan.pending_exclusion:  # only ever set under their patches
        await mark_suspects(wf, attribution, job, plan.suspect_nodes, plan.pending_exclusion, lost)
    follow = follows_in_job(attribution, policy) and (wf.straight or workflow.patched("follow-in-job-restarts"))
    await execute(wf, plan, job.job_id, job.restart_count, follow=follow, pend=keep and job.state in ACTIVE_JOB_STATES)
    return (follow and wf.incident.state is S.FOLLOWING_LAUNCHER) or wf.incident.state is S.PENDING_EXCLUSION


def _pending(wf: Incident) -> tuple[str, ...]:
    """The nodes this job's straggler verdicts left pending for its next restart: this incident's
    own earlier plan, and the node memory's record of the job's earlier incidents."""
    earlier = wf.incident.plan.pending_exclusion if wf.incident.plan is not None else ()
    remembered = wf.incident.memory.pending if wf.incident.memory is not None else ()
    return tuple(dict.fromkeys((*earlier, *remembered)))


async def _stand_on(wf: Incident, attributed: AttributeResult) -> tuple[Attribution, JobInfo | None]:
    """Takes an attribution as the incident's, once the node memory weighed in."""
    start = wf.start
    wf.attributed_again(attributed)
    attribution, job = attributed.attribution, attributed.job
    # Evidence that may not act may not teach the node memory either (it would drain later).
    if (job is not None and start.policy.node_memory.enabled and not attributed.evidence_only
            and (wf.straight or workflow.patched("node-memory"))):
        attribution, memory, early = await remember(wf, attribution, job)
        wf.remembered(memory, early)
        if memory is not None:
            wf.attributed_again(attributed.model_copy(update={"attribution": attribution}))
    if job is not None and (start.mode is None or start.policy_from_service):
        wf.governed(governing_mode(start.policy.mode_for(job.partition), start.mode))
    wf.move(S.ATTRIBUTED, attribution.explanation + (f" ({attributed.note})" if attributed.note else ""))
    if attributed.launcher:
        wf.record(S.ATTRIBUTED, attributed.launcher)
    wf.upsert()
    return attribution, job
