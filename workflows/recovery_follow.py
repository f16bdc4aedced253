"""Waiting on the job and its evidence between an incident's plans: the loop's three waits.

A plan is not always the end. A job that asked not to be restarted gets time to end by itself
(`let_the_job_end`); evidence goodput may not act on waits for evidence it may
(`await_actionable`); a job its own launcher restarted in-job is followed until the launcher gives
up (`follow_launcher`); a job that runs on while a straggler's exclusion pends is followed for its
later failure (`follow_pending`). Each waits on durable timers and the `anomaly` signal, then hands the
workflow the attribution to plan on, or None when the incident closed. Step functions of
RecoveryWorkflow (workflows.recovery_steps).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.checkpoints import Checkpoint
    from goodput.models import RestartEffect
    from goodput.recover.incident import AttributeResult, CheckpointInput, CheckpointResult
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.recovery_rules import ending_by_itself
    from goodput.recover.straggler_plan import StragglerRestart, newer_checkpoint
    from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo
    from workflows.recovery_steps import Escalation, Incident

S = IncidentState


async def let_the_job_end(wf: Incident, attributed: AttributeResult) -> AttributeResult | None:
    """A job that asked not to be restarted while it still runs is ending by itself (NVRx's
    launchers log their verdict, then all exit 93): give it the policy's grace to end with its
    own exit code, which outer tooling reads, before the plan stops it. None: cancelled."""
    grace = wf.start.policy.never_restart_grace_s
    job = ending_by_itself(attributed, grace)
    if job is None or not (wf.straight or workflow.patched("let-the-job-end")):
        return attributed
    wf.record(wf.incident.state, f"job {job.job_id} asked not to be restarted and is still {job.state}: it gets "
                                 f"{grace:.0f} s to end by itself, with its own exit code, before goodput stops it")
    deadline = workflow.now() + timedelta(seconds=grace)
    while attributed.job is not None and attributed.job.state in ACTIVE_JOB_STATES:
        left = (deadline - workflow.now()).total_seconds()
        more = left > 0 and await wf.wait(wf.evidence_past(wf.incident.anomaly_count), left)
        if wf.cancelled_here():
            return None
        attributed = await wf.attribute()
        if not more:
            break
    return attributed


async def await_actionable(wf: Incident, deadline: datetime) -> AttributeResult | None:
    """After evidence-only anomalies: the attribution of the next evidence, or None when the
    incident closed (cancelled, or nothing new before `deadline`, `evidence_only_wait_s` after
    the first)."""
    policy = wf.start.policy
    left = (deadline - workflow.now()).total_seconds()
    arrived = left > 0 and await wf.wait(wf.evidence_past(wf.incident.weighed), left)
    if wf.cancelled_here():
        return None
    if not arrived:
        wf.move(S.RECOMMENDED_ONLY, f"no evidence goodput may act on within "
                                    f"{policy.evidence_only_wait_s:.0f} s: recommended only")
        return None
    return await _coalesced(wf)


async def _coalesced(wf: Incident) -> AttributeResult | None:
    """Lets the rest of a burst arrive, then attributes all of it; None when cancelled meanwhile."""
    if wf.start.policy.coalesce_window_s > 0:
        await wf.wait(lambda: wf.cancel_requested(), wf.start.policy.coalesce_window_s)
    if wf.cancelled_here():
        return None
    return await wf.attribute()


async def follow_launcher(wf: Incident) -> AttributeResult | None:
    """While the job's launcher restarts it in-job, wait for later evidence of the same job
    attempt and weigh all of it again. Returns the attribution to act on once the launcher
    gave up, asked not to be restarted or the job ended; None when the incident closed
    (cancelled, or the launcher kept the job running for the whole window)."""
    window = wf.start.policy.in_job_follow_s
    while True:
        # Counted from what the latest attribution weighed, not from now: evidence that came
        # in while the plan ran (its notification, say) is new evidence too.
        seen = wf.incident.weighed
        arrived = await wf.wait(wf.evidence_past(seen), window)
        if wf.cancelled_here():
            return None
        if not arrived:
            wf.move(S.STOPPED, f"no further evidence for {window:.0f} s: the job's launcher handled the "
                               "failure in-job; goodput took no recovery action")
            await wf.notify("handled in-job by the job's launcher; goodput took no recovery action")
            return None
        attributed = await _coalesced(wf)
        if attributed is None:
            return None
        effect = attributed.attribution.restart_effect
        more = wf.incident.anomaly_count - seen
        if effect is not RestartEffect.IN_JOB:
            wf.record(S.FOLLOWING_LAUNCHER, f"{more} more anomalies: restart effect now {effect}; "
                                            "weighing the evidence again")
            return attributed
        wf.attributed_again(attributed)
        wf.record(S.FOLLOWING_LAUNCHER, f"{more} more anomalies: still restarted in-job by the job's "
                                        "launcher; following on" + (f" ({attributed.launcher})"
                                                                    if attributed.launcher else ""))


async def follow_pending(wf: Incident) -> AttributeResult | None:
    """While a straggler's exclusion pends the job runs on: wait for its later evidence of this
    attempt (it failed, another verdict) and weigh all of it again, the exclusion with it (the
    next plan that restarts the job excludes the node). Under `next-checkpoint`, also look for a
    newer checkpoint every `checkpoint_poll_s`; once there is one, weigh the evidence again to
    restart off the node now. None when the incident closed (cancelled, or the job ran the
    policy's `straggler.follow_s` without more evidence)."""
    policy = wf.start.policy.straggler
    window = policy.follow_s
    seen = wf.incident.weighed
    plan = wf.incident.plan
    pending = ", ".join(plan.pending_exclusion) if plan is not None and plan.pending_exclusion else "nothing"
    if policy.restart is StragglerRestart.NEXT_CHECKPOINT and window > 0:
        arrived, saved = await _until_checkpoint(wf, seen, window, policy.checkpoint_poll_s)
        if saved is not None and not wf.cancelled_here():
            wf.checkpoint_saved(saved)
            wf.record(S.PENDING_EXCLUSION, f"the job saved checkpoint step {saved.step} ({saved.path}): "
                                           f"restarting it off {pending} now (straggler.restart = next-checkpoint)")
            return await wf.attribute()
    else:
        arrived = window > 0 and await wf.wait(wf.evidence_past(seen), window)
    if wf.cancelled_here():
        return None
    if not arrived:
        wf.move(S.RECOMMENDED_ONLY, f"no further evidence for {window:.0f} s: the job ran on; {pending} stays "
                                    "pending in node memory for the job's next restart")
        return None
    attributed = await _coalesced(wf)
    if attributed is not None:
        wf.record(S.PENDING_EXCLUSION, f"{wf.incident.anomaly_count - seen} more anomalies: weighing the "
                                       f"evidence again, {pending} still pending")
    return attributed


async def _until_checkpoint(wf: Incident, seen: int, window: float, poll_s: float) -> tuple[bool, Checkpoint | None]:
    """Waits up to `window` for evidence past `seen`, looking for a newer checkpoint than the one
    there is now every `poll_s`: (evidence arrived, the newer checkpoint when one was saved)."""
    attributed = wf.incident.attributed
    job = attributed.job if attributed is not None else None
    baseline = await _newest(wf, job)
    deadline = workflow.now() + timedelta(seconds=window)
    while (left := (deadline - workflow.now()).total_seconds()) > 0:
        if await wf.wait(wf.evidence_past(seen), min(left, poll_s)):
            return True, None
        if wf.cancel_requested():
            return False, None
        found = await _newest(wf, job)
        if newer_checkpoint(baseline, found):
            return False, found
    return False, None


async def _newest(wf: Incident, job: JobInfo | None) -> Checkpoint | None:
    """The job's newest valid checkpoint now (the `find_checkpoint` step); None when there is none
    or it could not be read (a note: the exclusion goes on pending)."""
    if job is None:
        return None
    try:
        found = await wf.step("find_checkpoint", CheckpointInput(incident_id=wf.id, job=job), CheckpointResult)
    except Escalation as why:
        wf.record(wf.incident.state, f"could not look for a newer checkpoint: {why}")
        return None
    return found.checkpoint
