"""RecoveryWorkflow: one durable workflow per incident (cluster + job id + job attempt).

Started by signal-with-start, so a burst of anomalies for one job attempt is one incident: the
first anomaly starts it, the rest arrive as `anomaly` signals and are folded into the evidence.
The workflow only orchestrates; attribution runs in an activity (it needs the scheduler's view of
the job), planning is the pure `plan_recovery`, and every effect is an idempotent activity.
Operators steer it with `approve`/`cancel` signals (the Temporal UI can send those) or the
`decide` update, which returns the resulting state to the CLI. Evidence that is not the job's own
output (pushed lines from another file; goodput.diagnose.provenance) never makes it act: it
recommends and waits, `awaiting-evidence`, for evidence it may act on.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from goodput.checkpoints import Checkpoint, LostWork, lost_work_of
    from goodput.diagnose.node_memory import MemoryVerdict, observation_of, with_memory
    from goodput.models import (
        ActionKind,
        Anomaly,
        Attribution,
        LogMark,
        Mode,
        OperatorDecision,
        RecoveryPlan,
        RestartEffect,
    )
    from goodput.recover.audit import AuditAction
    from goodput.recover.incident import (
        AttributeInput,
        AttributeResult,
        CheckpointInput,
        CheckpointResult,
        Decision,
        DecisionVerb,
        IncidentReport,
        MemoryInput,
        RecoveryStart,
        ResumeInput,
        ResumeResult,
        StopInput,
        TimelineEvent,
        VerifyInput,
        VerifyResult,
    )
    from goodput.recover.kill_switch import effective_mode
    from goodput.recover.lifecycle import OUTCOME_OF, IncidentState, is_terminal
    from goodput.recover.node_incident import LinkAnswer
    from goodput.recover.policy import ResumeStrategy, plan_recovery
    from goodput.recover.spares import SpareGrant, spare_outcome
    from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo
    from workflows.audit_trail import AuditTrail
    from workflows.evidence import Evidence
    from workflows.node_link import NodeLinks
    from workflows.recovery_steps import CancelledByOperator, Escalation
    from workflows.spare_grants import SpareGrants

S = IncidentState


@workflow.defn
class RecoveryWorkflow(NodeLinks, Evidence, SpareGrants):
    @workflow.init
    def __init__(self, start: RecoveryStart) -> None:
        self._start = start
        self._anomalies: list[Anomaly] = []
        self._anomaly_count = 0
        self._weighed = 0  # how many anomalies the latest attribution saw
        self._seen_ids: set[str] = set()
        self._set_aside: set[str] = set()  # anomalies attribution found to be evidence only
        self._log_marks: tuple[LogMark, ...] = ()
        self._state = S.DETECTED
        self._mode = start.mode or start.policy.mode
        self._decision: Decision | None = None
        self._timeline: list[TimelineEvent] = []
        self._attributed: AttributeResult | None = None
        self._plan: RecoveryPlan | None = None
        self._resumed_job_id: str | None = None
        self._checkpoint: Checkpoint | None = None
        self._lost_work: LostWork | None = None
        self._actions_done: list[str] = []
        self._audit = AuditTrail()
        # Reported and indexed so that a node fault lists every job it hit (workflows.node_link).
        self._node_incidents: list[str] = []
        self._node_answers: dict[str, LinkAnswer] = {}
        self._spare_grants: dict[str, SpareGrant] = {}  # pool -> the owner it let in (workflows.spare_grants)
        self._evidence_deadline: datetime | None = None  # while only evidence-only anomalies came

    # -- run ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: RecoveryStart) -> IncidentReport:
        self._record(S.DETECTED, f"incident opened for job {start.key.job_id} attempt {start.key.job_attempt}")
        await workflow.wait_condition(lambda: bool(self._anomalies) or self._cancel_requested())
        # Let the rest of a burst arrive before attributing, unless someone cancels first.
        if start.policy.coalesce_window_s > 0:
            await self._wait(lambda: self._cancel_requested(), start.policy.coalesce_window_s)
        try:
            await self._recover(start)
        except CancelledByOperator:
            self._cancelled_here()
        except Escalation as why:
            self._move(S.ESCALATED, str(why))
            await self._notify(f"escalated: {why}")
        finally:
            await self._end_spare_grants()
        if self._state is S.CANCELLED:
            await self._notify(self._timeline[-1].detail)
        await self._flush_audit()
        if workflow.patched("linger-for-late-evidence") and start.policy.linger_s > 0:
            await self._wait(lambda: False, start.policy.linger_s)
        return self.report()

    async def _recover(self, start: RecoveryStart) -> None:
        attributed: AttributeResult | None = None
        while True:
            if self._cancelled_here():
                return
            if attributed is None:
                attributed = await self._attribute(start)
            elif self._decision is not None and self._decision.verb is DecisionVerb.APPROVE:
                self._decision = None  # approving the in-job plan approved nothing that came after it
            attributed = await self._let_the_job_end(start, attributed)
            if attributed is None:
                return
            following = await self._recover_once(start, attributed)
            if self._state is S.AWAITING_EVIDENCE:
                attributed = await self._await_actionable(start)
                if attributed is None:
                    return
                continue
            if not following:
                return
            attributed = await self._follow_launcher(start)
            if attributed is None:
                return

    async def _attribute(self, start: RecoveryStart) -> AttributeResult:
        self._weighed = self._anomaly_count
        result = await self._step("attribute", AttributeInput(incident_id=self._id, key=start.key,
                                                              anomalies=tuple(self._anomalies)), AttributeResult)
        self._set_aside.update(result.set_aside)  # empty in histories from before it existed
        return result

    async def _let_the_job_end(self, start: RecoveryStart, attributed: AttributeResult) -> AttributeResult | None:
        """A job that asked not to be restarted while it still runs is ending by itself (NVRx's
        launchers log their verdict, then all exit 93): give it the policy's grace to end with its
        own exit code, which outer tooling reads, before the plan stops it. None: cancelled."""
        grace = start.policy.never_restart_grace_s
        job = attributed.job
        if (attributed.attribution.restart_effect is not RestartEffect.NEVER or job is None
                or job.state not in ACTIVE_JOB_STATES or grace <= 0 or not workflow.patched("let-the-job-end")):
            return attributed
        self._record(self._state, f"job {job.job_id} asked not to be restarted and is still {job.state}: it gets "
                                  f"{grace:.0f} s to end by itself, with its own exit code, before goodput stops it")
        deadline = workflow.now() + timedelta(seconds=grace)
        while attributed.job is not None and attributed.job.state in ACTIVE_JOB_STATES:
            left = (deadline - workflow.now()).total_seconds()
            more = left > 0 and await self._wait(self._evidence_past(self._anomaly_count), left)
            if self._cancelled_here():
                return None
            attributed = await self._attribute(start)
            if not more:
                break
        return attributed

    async def _recover_once(self, start: RecoveryStart, attributed: AttributeResult) -> bool:
        """Attribute, plan and act once; True when the plan left the job to its own launcher's
        in-job restart and the incident goes on following the job."""
        self._attributed = attributed
        attribution, job = self._attributed.attribution, self._attributed.job
        # Evidence that may not act may not teach the node memory either (it would drain later).
        if (job is not None and start.policy.node_memory.enabled and not self._attributed.evidence_only
                and workflow.patched("node-memory")):
            attribution = await self._remember(attribution, job)
        if start.mode is None and job is not None:
            self._mode = start.policy.mode_for(job.partition)
        self._move(S.ATTRIBUTED, attribution.explanation + (f" ({self._attributed.note})"
                                                            if self._attributed.note else ""))
        if self._attributed.launcher:
            self._record(S.ATTRIBUTED, self._attributed.launcher)
        self._upsert()

        self._plan = plan_recovery(attribution, job, start.policy)
        self._move(S.PLANNED, self._plan.rationale)
        self._upsert()
        if self._cancelled_here():
            return False
        if self._plan.blocked_by_blast_radius:
            raise Escalation(self._plan.rationale)
        if job is None:
            raise Escalation(self._attributed.note or "the scheduler has no record of this job")

        if self._attributed.evidence_only and workflow.patched("pushed-output-checked"):
            # Whatever the mode: lines goodput could not tie to the job's own output are reported only.
            said = f"evidence only ({self._attributed.evidence_only}): recommended — {self._plan.rationale}"
            if start.policy.evidence_only_wait_s > 0:
                self._move(S.AWAITING_EVIDENCE, f"{said}; waiting for evidence goodput may act on")
                self._upsert()  # listed as open, in its own state, like one awaiting approval
            else:
                self._move(S.RECOMMENDED_ONLY, said)
            await self._notify(f"recommendation (unverified pushed evidence): {self._plan.rationale}")
            return False
        if self._mode is not Mode.MONITOR and workflow.patched("kill-switch"):
            self._mode, why = effective_mode(self._mode, await self._kill_switch())
            if why:
                self._record(self._state, why)
        if self._mode is Mode.MONITOR:
            await self._recommend()
            self._move(S.RECOMMENDED_ONLY, f"monitor mode: recommended — {self._plan.rationale}")
            await self._notify(f"recommendation: {self._plan.rationale}")
            return False
        if self._mode is Mode.APPROVE:
            self._move(S.AWAITING_APPROVAL, "waiting for an operator to approve or cancel")
            self._upsert()
            await self._notify(f"approval needed: {self._plan.rationale}")
            decided = await self._wait(lambda: self._decision is not None,
                                       start.policy.approval_timeout_s)
            if not decided:
                raise Escalation(f"no decision within {start.policy.approval_timeout_s:.0f}s")
            if self._cancelled_here():
                return False
            if workflow.patched("kill-switch"):
                _, why = effective_mode(self._mode, await self._kill_switch())
                if why:  # engaged while the plan waited: it wins over the approval
                    raise Escalation(f"approved, but not carried out: {why}")
        follow = (attribution.restart_effect is RestartEffect.IN_JOB and start.policy.in_job_follow_s > 0
                  and workflow.patched("follow-in-job-restarts"))
        await self._execute(self._plan, job.job_id, job.restart_count, follow=follow)
        return follow and self._state is S.FOLLOWING_LAUNCHER

    async def _await_actionable(self, start: RecoveryStart) -> AttributeResult | None:
        """After evidence-only anomalies: the attribution of the next evidence, or None when the
        incident closed (cancelled, or nothing new within `evidence_only_wait_s` of the first)."""
        if self._evidence_deadline is None:
            self._evidence_deadline = workflow.now() + timedelta(seconds=start.policy.evidence_only_wait_s)
        left = (self._evidence_deadline - workflow.now()).total_seconds()
        arrived = left > 0 and await self._wait(self._evidence_past(self._weighed), left)
        if self._cancelled_here():
            return None
        if not arrived:
            self._move(S.RECOMMENDED_ONLY, f"no evidence goodput may act on within "
                                           f"{start.policy.evidence_only_wait_s:.0f} s: recommended only")
            return None
        if start.policy.coalesce_window_s > 0:
            await self._wait(lambda: self._cancel_requested(), start.policy.coalesce_window_s)
        if self._cancelled_here():
            return None
        return await self._attribute(start)

    async def _follow_launcher(self, start: RecoveryStart) -> AttributeResult | None:
        """While the job's launcher restarts it in-job, wait for later evidence of the same job
        attempt and weigh all of it again. Returns the attribution to act on once the launcher
        gave up, asked not to be restarted or the job ended; None when the incident closed
        (cancelled, or the launcher kept the job running for the whole window)."""
        window = start.policy.in_job_follow_s
        while True:
            # Counted from what the latest attribution weighed, not from now: evidence that came
            # in while the plan ran (its notification, say) is new evidence too.
            seen = self._weighed
            arrived = await self._wait(self._evidence_past(seen), window)
            if self._cancelled_here():
                return None
            if not arrived:
                self._move(S.STOPPED, f"no further evidence for {window:.0f} s: the job's launcher handled the "
                                      "failure in-job; goodput took no recovery action")
                await self._notify("handled in-job by the job's launcher; goodput took no recovery action")
                return None
            if start.policy.coalesce_window_s > 0:
                await self._wait(lambda: self._cancel_requested(), start.policy.coalesce_window_s)
            if self._cancelled_here():
                return None
            attributed = await self._attribute(start)
            effect = attributed.attribution.restart_effect
            if effect is not RestartEffect.IN_JOB:
                self._record(S.FOLLOWING_LAUNCHER, f"{self._anomaly_count - seen} more anomalies: restart effect "
                                                   f"now {effect}; weighing the evidence again")
                return attributed
            self._attributed = attributed
            self._record(S.FOLLOWING_LAUNCHER, f"{self._anomaly_count - seen} more anomalies: still restarted "
                                               "in-job by the job's launcher; following on"
                         + (f" ({attributed.launcher})" if attributed.launcher else ""))

    async def _remember(self, attribution: Attribution, job: JobInfo) -> Attribution:
        """The cluster's memory of nodes weighs in on what this incident could not settle alone."""
        observation = observation_of(self._id, attribution, job, workflow.now())
        if observation is None:
            return attribution
        try:
            verdict = await self._step("consult_node_memory", MemoryInput(
                cluster=self._start.key.cluster, observation=observation, policy=self._start.policy.node_memory),
                MemoryVerdict)
        except Escalation as why:  # a recovery never waits on, or fails for, the memory
            return attribution.model_copy(update={"explanation": f"{attribution.explanation}; node memory "
                                                                 f"unavailable ({why})"})
        remembered = with_memory(attribution, verdict, job)
        if verdict.note and remembered == attribution:
            remembered = attribution.model_copy(update={"explanation": f"{attribution.explanation}; node memory: "
                                                                       f"{verdict.note}"})
        if self._attributed is not None:
            self._attributed = self._attributed.model_copy(update={"attribution": remembered})
        return remembered

    def _evidence_past(self, seen: int) -> Callable[[], bool]:
        return lambda: self._anomaly_count > seen or self._cancel_requested()

    async def _execute(self, plan: RecoveryPlan, job_id: str, restarts: int, *, follow: bool = False) -> None:
        resumed: ResumeResult | None = None
        for action in plan.actions:
            if self._cancelled_here():
                return
            if action.kind is ActionKind.DRAIN_NODES:
                await self._isolate(action)
            elif action.kind in (ActionKind.REQUEUE, ActionKind.RESUBMIT):
                resumed = await self._resume(action.kind, job_id, action.exclude, restarts)
            elif action.kind is ActionKind.STOP_JOB:
                detail = await self._audited(AuditAction.STOP, (), action.reason, self._step(
                    "stop_job", StopInput(incident_id=self._id, job_id=job_id, observed_at=self._observed_at()),
                    str), str)
                self._done(detail)
        if resumed is None and follow:
            self._move(S.FOLLOWING_LAUNCHER, f"{plan.rationale}; following the job for "
                                             f"{self._start.policy.in_job_follow_s:.0f} s past its latest "
                                             "evidence, to act if the launcher gives up")
            self._upsert()
            await self._notify(f"restarted in-job by the job's launcher, goodput follows: {plan.rationale}")
            return
        if resumed is None:
            self._move(S.STOPPED, plan.rationale)
            await self._notify(f"stopped: {plan.rationale}")
            return
        self._move(S.RECOVERED, f"job {resumed.job_id} verified running")
        await self._notify(f"recovered: job {resumed.job_id} running again")

    async def _resume(self, kind: ActionKind, job_id: str, exclude: tuple[str, ...],
                      restarts: int) -> ResumeResult:
        policy = self._start.policy
        strategy = ResumeStrategy(kind.value)
        checkpoint: Checkpoint | None = None
        if workflow.patched("checkpoint-aware-resume") and self._attributed and self._attributed.job:
            found = await self._step("find_checkpoint", CheckpointInput(
                incident_id=self._id, job=self._attributed.job), CheckpointResult)
            checkpoint = self._checkpoint = found.checkpoint
            self._done(found.explanation)
            self._lost_work = lost_work_of(self._anomalies, checkpoint, self._attributed.job, policy.gpus_per_node)
            if self._lost_work is not None:
                self._done(f"lost work: {self._lost_work.iterations} iterations, {self._lost_work.seconds:.0f} s, "
                           f"{self._lost_work.gpu_hours:.2f} GPU-hours")
        environment = ({"GOODPUT_RESUME_FROM": checkpoint.path, "GOODPUT_RESUME_STEP": str(checkpoint.step)}
                       if checkpoint else {})
        await self._before_pool(policy.spares, self._attributed.job if self._attributed else None)
        for attempt in range(1, policy.max_resume_attempts + 1):
            self._move(S.RESUMING, f"{kind.value} job {job_id} (attempt {attempt})")
            resumed = await self._audited(AuditAction(kind.value), exclude, f"attempt {attempt}", self._step(
                "resume", ResumeInput(incident_id=self._id, job_id=job_id, strategy=strategy, exclude=exclude,
                                      restart_count_before=restarts, environment=environment,
                                      observed_at=self._observed_at(),
                                      spares=policy.spares if policy.spares.enabled else None), ResumeResult),
                lambda r: r.detail)
            self._resumed_job_id = resumed.job_id
            self._done(resumed.detail)
            self._move(S.VERIFYING, f"waiting for job {resumed.job_id} to run")
            progress_past = checkpoint.step if checkpoint else None
            verified = await self._step("verify", VerifyInput(
                job_id=resumed.job_id, restart_count_before=restarts,
                same_job=resumed.job_id == job_id, timeout_s=policy.verify_running_timeout_s,
                poll_interval_s=policy.verify_poll_interval_s, progress_past=progress_past,
                progress_timeout_s=policy.verify_progress_timeout_s, log_offsets=resumed.log_offsets,
                capacity_wait_s=policy.capacity_wait_s),
                VerifyResult, timeout=timedelta(seconds=policy.verify_running_timeout_s + 60 + policy.capacity_wait_s
                                                + (policy.verify_progress_timeout_s if checkpoint else 0)))
            self._done(verified.detail)
            if verified.ok and resumed.spare_pool:
                self._done(spare_outcome(resumed.spare_pool, resumed.spare_nodes, verified.nodes))
            if verified.ok:
                return resumed
            if resumed.job_id == job_id:
                restarts += 1  # our requeue moved the count; the next attempt must move it again
        raise Escalation(f"job did not run again after {policy.max_resume_attempts} attempt(s)")

    # -- signals, updates, queries --------------------------------------------------------

    @workflow.signal
    def approve(self, decision: OperatorDecision) -> None:
        self._take(Decision(verb=DecisionVerb.APPROVE, by=decision))

    @workflow.signal
    def cancel(self, decision: OperatorDecision) -> None:
        self._take(Decision(verb=DecisionVerb.CANCEL, by=decision))

    @workflow.update
    async def decide(self, decision: Decision) -> IncidentState:
        self._take(decision)
        # Return once the workflow has acted on it, so the CLI prints the state it caused.
        if decision.verb is DecisionVerb.CANCEL:
            await workflow.wait_condition(lambda: is_terminal(self._state))
        else:
            await workflow.wait_condition(lambda: self._state is not S.AWAITING_APPROVAL)
        return self._state

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        if is_terminal(self._state):
            raise ApplicationError(f"incident is already {self._state}", type="IncidentClosed")
        if self._decision is not None:
            raise ApplicationError(f"already decided: {self._decision.verb} by {self._decision.by.who}",
                                   type="AlreadyDecided")
        if decision.verb is DecisionVerb.APPROVE and self._state is not S.AWAITING_APPROVAL \
                and self._mode is not Mode.APPROVE:
            raise ApplicationError(f"incident is {self._state} in {self._mode} mode; nothing to approve",
                                   type="NotAwaitingApproval")

    @workflow.query
    def report(self) -> IncidentReport:
        attributed = self._attributed
        return IncidentReport(
            incident_id=self._id, key=self._start.key, state=self._state, mode=self._mode,
            anomaly_count=self._anomaly_count, anomalies=tuple(self._anomalies),
            attribution=attributed.attribution if attributed else None, plan=self._plan,
            job=attributed.job if attributed else None, resumed_job_id=self._resumed_job_id,
            decision=self._decision.by if self._decision else None,
            decision_verb=self._decision.verb.value if self._decision else None,
            outcome=OUTCOME_OF.get(self._state), timeline=tuple(self._timeline),
            actions_done=tuple(self._actions_done), checkpoint=self._checkpoint, lost_work=self._lost_work,
            audit=tuple(self._audit.records), node_incidents=tuple(self._node_incidents))

    @workflow.query
    def state(self) -> IncidentState:
        return self._state

    @workflow.query
    def plan(self) -> RecoveryPlan | None:
        return self._plan

    # -- helpers --------------------------------------------------------------------------

    def _take(self, decision: Decision) -> None:
        if self._decision is None and not is_terminal(self._state):
            self._decision = decision
            self._record(self._state, f"{decision.verb.value} by {decision.by.who}: {decision.by.reason}")
            if workflow.patched("audit-trail"):
                self._audit.add(self._start.key, self._mode, AuditAction(decision.verb.value),
                                actor=f"operator:{decision.by.who}", reason=decision.by.reason,
                                origin=decision.by.origin,
                                result=f"taken while {self._state}")
