"""Carrying out an incident's plan: drain, requeue or resubmit (verified), stop; and the node memory.

`execute` runs the plan's actions in order and ends the incident as recovered, stopped or
following the job's launcher; `resume` is one requeue or resubmit with its checkpoint, its spare
pool and its verification, retried up to the policy's attempts. `remember` lets the cluster's
node memory weigh in on the attribution before the plan is made. Step functions of
RecoveryWorkflow (workflows.recovery_steps): they tell the workflow what they found and it keeps
it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.checkpoints import Checkpoint, lost_work_of
    from goodput.diagnose.node_memory import MemoryVerdict, observation_of
    from goodput.models import ActionKind, Attribution, RecoveryPlan
    from goodput.recover.audit import AuditAction
    from goodput.recover.consults import MemoryTrustInput, MemoryTrustResult, asked_together
    from goodput.recover.incident import (
        AttributeResult,
        CheckpointInput,
        CheckpointResult,
        DecisionVerb,
        MemoryInput,
        ResumeInput,
        ResumeResult,
        StopInput,
        VerifyResult,
    )
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.node_health import CheckResult, NodeCheckInput, check_argv
    from goodput.recover.policy import ResumeStrategy
    from goodput.recover.recovery_rules import (
        expedite_hold_note,
        lost_work_note,
        memory_unavailable,
        memory_weighed,
        observed_at,
        resume_environment,
        verify_input,
        verify_timeout_s,
    )
    from goodput.recover.spares import spare_outcome
    from goodput.recover.straggler_plan import pending_note
    from goodput.recover.trust import RuleAutonomy
    from goodput.scheduler import JobInfo
    from workflows.node_link import isolate
    from workflows.recovery_steps import Escalation, Incident
    from workflows.recovery_trust import recommendation
    from workflows.spares import grant_to_end

S = IncidentState


async def execute(wf: Incident, plan: RecoveryPlan, job_id: str, restarts: int, *, follow: bool = False,
                  pend: bool = False) -> None:
    """Runs the plan's actions in order, then ends on what they did: recovered, stopped,
    following the job's own launcher when the plan left the restart to it, or following the
    running job while a straggler's exclusion pends (`pend`)."""
    resumed: ResumeResult | None = None
    for action in plan.actions:
        if wf.cancelled_here():
            return
        if action.kind is ActionKind.DRAIN_NODES:
            await isolate(wf, action)
        elif action.kind in (ActionKind.REQUEUE, ActionKind.RESUBMIT):
            resumed = await resume(wf, action.kind, job_id, action.exclude, restarts)
        elif action.kind is ActionKind.STOP_JOB:
            if (held := expedite_held(wf.incident.attributed, patches_first=wf.patches_first)) is not None:
                wf.done(expedite_hold_note(held, restart=False, acting=True))  # not cancelled: left held
                continue
            detail = await wf.audited(AuditAction.STOP, (), action.reason, wf.step(
                "stop_job", StopInput(incident_id=wf.id, job_id=job_id,
                                      observed_at=observed_at(wf.incident.anomalies)),
                str), str)
            wf.done(detail)
    if resumed is None and pend:
        decision = wf.incident.decision
        if decision is not None and decision.verb is DecisionVerb.APPROVE:
            wf.approval_spent()  # it approved this plan; the incident that follows the job may still be cancelled
        wf.move(S.PENDING_EXCLUSION, f"{plan.rationale}; following the job for "
                                     f"{wf.start.policy.straggler.follow_s:.0f} s past its latest evidence")
        wf.upsert()
        await wf.notify(f"straggler, the job keeps running: {plan.rationale}")
        return
    if resumed is None and follow:
        wf.move(S.FOLLOWING_LAUNCHER, f"{plan.rationale}; following the job for "
                                      f"{wf.start.policy.in_job_follow_s:.0f} s past its latest "
                                      "evidence, to act if the launcher gives up")
        wf.upsert()
        await wf.notify(f"restarted in-job by the job's launcher, goodput follows: {plan.rationale}")
        return
    if resumed is None:
        wf.move(S.STOPPED, plan.rationale)
        await wf.notify(f"stopped: {plan.rationale}")
        return
    wf.move(S.RECOVERED, f"job {resumed.job_id} verified running")
    await wf.notify(f"recovered: job {resumed.job_id} running again")


async def _checkpoint(wf: Incident) -> Checkpoint | None:
    """The newest valid checkpoint to resume from, and the work lost since it, both kept."""
    attributed = wf.incident.attributed
    if not (wf.straight or workflow.patched("checkpoint-aware-resume")) or attributed is None or attributed.job is None:
        return None
    found = await wf.step("find_checkpoint", CheckpointInput(incident_id=wf.id, job=attributed.job),
                          CheckpointResult)
    lost = lost_work_of(wf.incident.anomalies, found.checkpoint, attributed.job, wf.start.policy.gpus_per_node)
    wf.checkpoint_found(found.checkpoint, lost)
    wf.done(found.explanation)
    if lost is not None:
        wf.done(lost_work_note(lost))
    return found.checkpoint


async def resume(wf: Incident, kind: ActionKind, job_id: str, exclude: tuple[str, ...],
                 restarts: int) -> ResumeResult:
    """Requeue or resubmit, then verify the job runs again (and got past its checkpoint);
    up to `max_resume_attempts` times before a person is asked."""
    policy = wf.start.policy
    strategy = ResumeStrategy(kind.value)
    checkpoint = await _checkpoint(wf)
    environment = resume_environment(checkpoint)
    attributed = wf.incident.attributed
    grant = await grant_to_end(wf, policy.spares, attributed.job if attributed else None)
    if grant is not None:
        wf.granted(grant)
    for attempt in range(1, policy.max_resume_attempts + 1):
        wf.move(S.RESUMING, f"{kind.value} job {job_id} (attempt {attempt})")
        resumed = await wf.audited(AuditAction(kind.value), exclude, f"attempt {attempt}", wf.step(
            "resume", ResumeInput(incident_id=wf.id, job_id=job_id, strategy=strategy, exclude=exclude,
                                  restart_count_before=restarts, environment=environment,
                                  observed_at=observed_at(wf.incident.anomalies),
                                  spares=policy.spares if policy.spares.enabled else None,
                                  known=attributed.job if attributed else None,
                                  known_at=attributed.job_read_at if attributed else None), ResumeResult),
            lambda r: r.detail)
        wf.resumed(resumed.job_id)
        wf.done(resumed.detail)
        wf.move(S.VERIFYING, f"waiting for job {resumed.job_id} to run")
        baseline = restarts
        if resumed.released_expedite_hold and (wf.patches_first or workflow.patched("release-expedited-hold")):
            baseline = restarts - 1  # Slurm's own requeue moved the count before the incident read it
        verified = await wf.step("verify", verify_input(resumed, job_id, baseline, policy, checkpoint),
                                 VerifyResult, timeout=timedelta(seconds=verify_timeout_s(policy, checkpoint)))
        wf.done(verified.detail)
        if verified.ok and resumed.spare_pool:
            wf.done(spare_outcome(resumed.spare_pool, resumed.spare_nodes, verified.nodes))
        if verified.ok:
            return resumed
        if resumed.job_id == job_id:
            restarts += 1  # our requeue moved the count; the next attempt must move it again
    raise Escalation(f"job did not run again after {policy.max_resume_attempts} attempt(s)")


def expedite_held(attributed: AttributeResult | None, *, patches_first: bool) -> JobInfo | None:
    """The incident's job when Slurm holds it after its own expedited requeue (25.11+), for
    incidents under `release-expedited-hold`; None otherwise (then nothing changes)."""
    job = attributed.job if attributed is not None else None
    if job is None or not job.expedite_held or not (patches_first or workflow.patched("release-expedited-hold")):
        return None
    return job


async def remember(wf: Incident, attribution: Attribution,
                   job: JobInfo) -> tuple[Attribution, MemoryVerdict | None, RuleAutonomy | None]:
    """The cluster's memory of nodes weighs in on what this incident could not settle alone.
    Returns the attribution to plan on, the memory's verdict when it answered (then the incident
    stands on it too; an unavailable memory is only a note in the explanation), and the track
    record's answer when the record heard the recommendation in the same round trip."""
    observation = observation_of(wf.id, attribution, job, workflow.now())
    if observation is None:
        return attribution, None, None
    asked = MemoryInput(cluster=wf.start.key.cluster, observation=observation, policy=wf.start.policy.node_memory)
    early = None
    try:
        if wf.fewer and asked_together(attribution):
            # One round trip for both entities (goodput.recover.consults); the record's answer
            # waits for the gates (workflows.recovery_gate), which it passes unchanged.
            both = await wf.step("consult_memory_and_trust", MemoryTrustInput(
                memory=asked, trust=recommendation(wf, attribution)), MemoryTrustResult)
            verdict, early = both.verdict, both.trust
        else:
            verdict = await wf.step("consult_node_memory", asked, MemoryVerdict)
    except Escalation as why:  # a recovery never waits on, or fails for, the memory
        return memory_unavailable(attribution, str(why)), None, None
    return memory_weighed(attribution, verdict, job), verdict, early


async def probe_suspects(wf: Incident, nodes: tuple[str, ...]) -> dict[str, CheckResult]:
    """The site's health probe on each node only the job's log blames, run now (the `check_node`
    step); a probe that cannot be run is a note, never a signal."""
    policy = wf.start.policy.exclude_before_drain
    found: dict[str, CheckResult] = {}
    for node in nodes:
        try:
            probe = await wf.step("check_node", NodeCheckInput(argv=check_argv(policy.probe_command, node),
                                                               timeout_s=policy.probe_timeout_s),
                                  CheckResult, timeout=timedelta(seconds=policy.probe_timeout_s + 60))
        except Escalation as why:
            wf.record(wf.incident.state, f"health probe of {node} not run: {why}")
            continue
        found[node] = probe
        outcome = "passed" if probe.passed else "failed" if probe.ran else "could not run"
        wf.record(wf.incident.state, f"health probe of {node} {outcome}: {probe.detail[:300]}")
    return found


async def mark_suspects(wf: Incident, attribution: Attribution, job: JobInfo, nodes: tuple[str, ...],
                        pending: tuple[str, ...] = (), lost: float | None = None) -> None:
    """Marks `nodes` suspect in the cluster's node memory: this incident's observation again,
    with the nodes it excluded without draining, and those a straggler's verdict excludes at the
    job's next restart (`pending`, kept there for the job's later incidents). A memory that cannot
    be reached is a note; the pending exclusion then lives in this incident alone."""
    if pending:
        wf.done(pending_note(pending, lost))
    observation = observation_of(wf.id, attribution, job, workflow.now())
    if observation is None or not wf.start.policy.node_memory.enabled:
        return
    marked = (*nodes, *(n for n in pending if n not in nodes))
    update: dict[str, object] = {"suspects": marked, "pending": pending} if pending else {"suspects": nodes}
    try:
        await wf.step("consult_node_memory", MemoryInput(
            cluster=wf.start.key.cluster, observation=observation.model_copy(update=update),
            policy=wf.start.policy.node_memory), MemoryVerdict)
    except Escalation as why:
        wf.record(wf.incident.state, f"could not mark {', '.join(marked)} suspect in node memory ({why})")
        return
    if pending:
        wf.done(f"marked {', '.join(marked)} suspect in node memory, pending exclusion at job {job.job_id}'s "
                "next restart (not drained)")
        return
    wf.done(f"marked {', '.join(nodes)} suspect in node memory (excluded from job {job.job_id}, not drained)")
