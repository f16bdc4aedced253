"""RecoveryWorkflow: one durable workflow per incident (cluster + job id + job attempt).

Started by signal-with-start, so a burst of anomalies for one job attempt is one incident: the
first anomaly starts it, the rest arrive as `anomaly` signals (or several at once as `anomalies`,
from a sink that folded them) and are folded into the evidence. The workflow only orchestrates:
attribution needs the scheduler's view of the job (an activity), planning is the pure
`plan_recovery`, and every effect is an idempotent activity.
Operators steer it with `approve`/`cancel` signals (the Temporal UI can send those) or the
`decide` update, which returns the resulting state to the CLI. Evidence that is not the job's own
output (pushed lines from another file; goodput.diagnose.provenance) never makes it act: it
recommends and waits, `awaiting-evidence`, for evidence it may act on.

This class reads as the loop (detect → attribute → plan → isolate → resume → verify) and holds
the incident's whole state in one `RecoveryState` (goodput.recover.recovery_state), which only
it changes. The longer steps are functions that receive it as an `Incident`
(workflows.recovery_steps): one pass to action (recovery_plan), isolating (node_link), acting
(recovery_actions), waits between plans (recovery_follow), the mode gate (recovery_gate), spares;
decisions with no Temporal in them are goodput.recover.recovery_rules. `straight-path` and
`fewer-steps` cut workflow tasks to the requeue (docs/architecture.md, "The straight path"; #29).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from goodput.checkpoints import Checkpoint, LostWork
    from goodput.detect.log_marks import merge
    from goodput.diagnose.node_memory import MemoryVerdict
    from goodput.models import Anomaly, LogMark, Mode, OperatorDecision, RecoveryPlan
    from goodput.recover.audit import GOODPUT_ACTOR, AuditAction
    from goodput.recover.incident import (
        AttributeInput,
        AttributeResult,
        Decision,
        DecisionVerb,
        IncidentReport,
        Notification,
        RecoveryStart,
        TimelineEvent,
    )
    from goodput.recover.lifecycle import OUTCOME_OF, IncidentState, is_terminal, transition
    from goodput.recover.node_incident import Delivery, LinkAnswer
    from goodput.recover.policy import Policy, as_recorded
    from goodput.recover.recovery_rules import cancel_requested, decide_refusal, room_for
    from goodput.recover.recovery_state import RecoveryState, incident_report
    from goodput.recover.spares import SpareGrant
    from goodput.recover.trust import RuleAutonomy
    from workflows import search
    from workflows.audit import audit_record, settled, write_audit
    from workflows.hang_stacks import with_stacks
    from workflows.recovery_follow import await_actionable, follow_launcher, follow_pending, let_the_job_end
    from workflows.recovery_gate import past_limit, service_policy
    from workflows.recovery_plan import plan_and_act
    from workflows.recovery_steps import STEP_TIMEOUT, CancelledByOperator, Escalation, run_step, runs_local, wait_for
    from workflows.recovery_trust import closed
    from workflows.spares import end_spare_grants

S = IncidentState
T = TypeVar("T")


@workflow.defn
class RecoveryWorkflow:
    """One incident, from its first anomaly to its outcome; the one writer of its RecoveryState."""

    @workflow.init
    def __init__(self, start: RecoveryStart) -> None:
        # A snapshot recorded before the safe defaults existed keeps the behaviour it was recorded with.
        self._start = start = start.model_copy(update={"policy": as_recorded(start.policy)})
        # A reporter's incident knows the service's mode only once it asked: until then, monitor.
        self._s = RecoveryState(mode=Mode.MONITOR if start.policy_from_service else start.mode or start.policy.mode)
        self._straight = self._fewer = self._patches_first = False
        self._early: RuleAutonomy | None = None
        self._search = search.OnePerTask()

    # -- the loop ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: RecoveryStart) -> IncidentReport:
        # Asked first, so an incident runs one path from its start to its end (never switches midway).
        # "patches-asked-first" (the newest) implies the two after it, so a new incident records
        # one marker here as before. It also takes, here, the patches that were asked right after
        # a local step: a local step that ends after its workflow task's deadline (a loaded worker)
        # resumes the code in the next task, its replay in the same one, so a patch asked there
        # reads differently on replay (a CI run failed so: Nondeterminism on the hang-stack-capture
        # marker). See PATCHES_ASKED_FIRST.
        self._patches_first = workflow.patched("patches-asked-first")
        self._fewer = self._patches_first or workflow.patched("fewer-steps")
        self._straight = self._fewer or workflow.patched("straight-path")
        start = self._start
        self.record(S.DETECTED, f"incident opened for job {start.key.job_id} attempt {start.key.job_attempt}")
        try:
            if start.policy_from_service:
                start = await service_policy(self)
            await workflow.wait_condition(lambda: bool(self._s.anomalies) or self.cancel_requested())
            # Let the rest of a burst arrive before attributing, unless someone cancels first.
            if start.policy.coalesce_window_s > 0:
                await self.wait(lambda: self.cancel_requested(), start.policy.coalesce_window_s)
            await self._recover(start)
        except CancelledByOperator:
            self.cancelled_here()
        except Escalation as why:
            self.move(S.ESCALATED, str(why))
            await self.notify(f"escalated: {why}")
        finally:
            grants, self._s.spare_grants = list(self._s.spare_grants.values()), {}
            await end_spare_grants(self, grants)
        if self._s.state is S.CANCELLED:
            await self.notify(self._s.timeline[-1].detail)
        await self._flush_audit()
        if self._s.trust_rule and (self._straight or workflow.patched("trust-record")):
            await closed(self, self._s.trust_rule)
        if (self._straight or workflow.patched("linger-for-late-evidence")) and start.policy.linger_s > 0:
            await self.wait(lambda: False, start.policy.linger_s)
        return self.report()

    async def _recover(self, start: RecoveryStart) -> None:
        """Attribute, plan and act; again while the job's launcher or unactionable evidence
        leaves the incident open, until it ends."""
        attributed: AttributeResult | None = None
        while True:
            if self.cancelled_here():
                return
            if attributed is None:
                attributed = await with_stacks(self, await self.attribute())
            elif self._s.decision is not None and self._s.decision.verb is DecisionVerb.APPROVE:
                self.approval_spent()  # approving the in-job plan approved nothing that came after it
            attributed = await let_the_job_end(self, attributed)
            if attributed is None:
                return
            following = await plan_and_act(self, attributed)
            if self._s.state is S.AWAITING_EVIDENCE:
                if self._s.evidence_deadline is None:
                    self._s.evidence_deadline = workflow.now() + timedelta(seconds=start.policy.evidence_only_wait_s)
                attributed = await await_actionable(self, self._s.evidence_deadline)
                if attributed is None:
                    return
                continue
            if not following:
                return
            attributed = await (follow_pending if self._s.state is S.PENDING_EXCLUSION else follow_launcher)(self)
            if attributed is None:
                return

    async def approval_past_limit(self, why: str) -> None:
        await past_limit(self, why)  # workflows.recovery_gate

    async def attribute(self) -> AttributeResult:
        self._s.weighed = self._s.anomaly_count
        result = await self.step("attribute", AttributeInput(incident_id=self.id, key=self._start.key,
                                                             anomalies=tuple(self._s.anomalies)), AttributeResult)
        self._s.set_aside.update(result.set_aside)  # empty in histories from before it existed
        return result

    # -- signals, updates, queries ----------------------------------------------------------

    @workflow.signal
    def anomaly(self, anomaly: Anomaly) -> None:
        """A detection for this job attempt: folded into the evidence once per anomaly id (detectors
        deliver at least once), its log marks kept as the furthest line per file. Only records."""
        self._s.log_marks = merge(self._s.log_marks, anomaly.log_marks)  # a repeat may still reach further
        if anomaly.id in self._s.seen_ids:
            return  # a detector retrying the same signal is not new evidence
        self._s.seen_ids.add(anomaly.id)
        self._s.anomaly_count += 1
        room = room_for(self._s.anomalies, self._s.set_aside)
        if not room.keep:
            return
        if room.evict is not None:
            self._s.set_aside.discard(self._s.anomalies.pop(room.evict).id)
        self._s.anomalies.append(anomaly)

    @workflow.signal
    def anomalies(self, batch: list[Anomaly]) -> None:
        """Detections for this job attempt that one sink folded while its earlier delivery was in
        flight (workers.watch.IncidentSink): each folded in order exactly as `anomaly` folds it.
        Additive: no recorded history has it, so it needs no `workflow.patched`."""
        for anomaly in batch:
            self.anomaly(anomaly)

    @workflow.signal
    def node_decision(self, delivery: Delivery) -> None:
        """A node incident's decision (or the lead) this incident waits for (workflows.node_link)."""
        self._s.node_answers.setdefault(delivery.node, delivery.answer)

    @workflow.signal
    def approve(self, decision: OperatorDecision) -> None:
        """An operator approves the plan (the Temporal UI can send this); the first decision wins."""
        self._take(Decision(verb=DecisionVerb.APPROVE, by=decision))

    @workflow.signal
    def cancel(self, decision: OperatorDecision) -> None:
        """An operator cancels the incident; a step in flight is cancelled with it."""
        self._take(Decision(verb=DecisionVerb.CANCEL, by=decision))

    @workflow.update
    async def decide(self, decision: Decision) -> IncidentState:
        """Approve or cancel from the CLI; returns the state the decision led to."""
        self._take(decision)
        # Return once the workflow has acted on it, so the CLI prints the state it caused.
        if decision.verb is DecisionVerb.CANCEL:
            await workflow.wait_condition(lambda: is_terminal(self._s.state))
        else:
            await workflow.wait_condition(lambda: self._s.state is not S.AWAITING_APPROVAL)
        return self._s.state

    @decide.validator
    def _validate_decide(self, decision: Decision) -> None:
        """Refuses, before it enters the history, a decision on a closed or decided incident,
        or an approval with nothing to approve."""
        refused = decide_refusal(self._s.state, self._s.mode, self._s.decision, decision)
        if refused is not None:
            raise ApplicationError(refused.message, type=refused.type)

    @workflow.query
    def report(self) -> IncidentReport:
        """The whole incident: state, evidence, attribution, plan, timeline, actions, audit."""
        return incident_report(self.id, self._start.key, self._s)

    @workflow.query
    def state(self) -> IncidentState:
        """Where the incident is in its state machine (goodput.recover.lifecycle)."""
        return self._s.state

    @workflow.query
    def plan(self) -> RecoveryPlan | None:
        """The latest plan, once there is one."""
        return self._s.plan

    @workflow.query
    def log_marks(self) -> tuple[LogMark, ...]:
        """The furthest line per job file that reached this incident from a log watcher."""
        return self._s.log_marks

    # -- what the step functions see (workflows.recovery_steps.Incident) -------------------

    @property
    def id(self) -> str:
        return workflow.info().workflow_id

    @property
    def start(self) -> RecoveryStart:
        return self._start

    @property
    def incident(self) -> RecoveryState:
        return self._s

    @property
    def straight(self) -> bool:
        return self._straight

    @property
    def fewer(self) -> bool:
        return self._fewer

    @property
    def patches_first(self) -> bool:
        return self._patches_first

    def told_early(self) -> RuleAutonomy | None:
        answer, self._early = self._early, None
        return answer

    def cancel_requested(self) -> bool:
        return cancel_requested(self._s.decision)

    def cancelled_here(self) -> bool:
        decision = self._s.decision
        if decision is not None and self.cancel_requested() and not is_terminal(self._s.state):
            self.move(S.CANCELLED, f"cancelled by {decision.by.who}: {decision.by.reason}")
            return True
        return is_terminal(self._s.state)

    def evidence_past(self, seen: int) -> Callable[[], bool]:
        return lambda: self._s.anomaly_count > seen or self.cancel_requested()

    async def step(self, name: str, arg: object, result_type: type[T], timeout: timedelta = STEP_TIMEOUT) -> T:
        local, shown = runs_local(name, straight=self._straight, fewer=self._fewer), self._s.show_waiting
        return await run_step(name, arg, result_type, self.cancel_requested, timeout, local=local, shown=shown,
                              patches_first=self._patches_first)

    async def wait(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        return await wait_for(condition, timeout_s)

    def record(self, state: IncidentState, detail: str) -> None:
        self._s.timeline.append(TimelineEvent(at=workflow.now(), state=state, detail=detail))

    def move(self, target: IncidentState, detail: str) -> None:
        if target is not self._s.state:
            self._s.state = transition(self._s.state, target)
        self.record(target, detail)
        if is_terminal(target):
            self.upsert()

    def done(self, detail: str) -> None:
        self._s.actions_done.append(detail)
        self.record(self._s.state, detail)

    def upsert(self) -> None:
        if not self._start.index:
            return
        wanted = search.updates(self._start.key, self._s.state, self._s.mode, self._s.attributed,
                                OUTCOME_OF.get(self._s.state), self._s.node_incidents)
        if self._straight:
            self._search.ask(wanted)
        else:
            workflow.upsert_search_attributes(wanted)

    async def notify(self, summary: str) -> None:
        attributed = self._s.attributed
        try:
            await self.step("notify", Notification(
                incident_id=self.id, state=self._s.state, summary=summary,
                category=attributed.attribution.category if attributed else None,
                lost_work=self._s.lost_work), type(None))
        except Escalation as why:
            # A broken chat webhook must not turn a recovered incident into an escalated one.
            self.record(self._s.state, f"notification failed: {why}")

    async def audited(self, action: AuditAction, nodes: tuple[str, ...], reason: str, step: Awaitable[T],
                      outcome: Callable[[T], str]) -> T:
        """Runs one action step with its audit record (added before the step, its result filled in
        after, so a failed or cancelled action is recorded too), then writes it to the log."""
        if not (self._straight or workflow.patched("audit-trail")):
            return await step
        index = self._audit(action, nodes=nodes, reason=reason, result="started")
        try:
            done = await step
        except (Escalation, CancelledByOperator) as failed:
            self._s.audit[index] = settled(self._s.audit[index], f"failed: {failed}"
                                           if isinstance(failed, Escalation) else "cancelled by an operator")
            raise
        self._s.audit[index] = settled(self._s.audit[index], outcome(done))
        await self._flush_audit()
        return done

    def attributed_again(self, attributed: AttributeResult) -> None:
        self._s.attributed = attributed

    def linked(self, node_incident_id: str) -> None:
        if node_incident_id not in self._s.node_incidents:
            self._s.node_incidents.append(node_incident_id)
            self.upsert()

    def node_answer(self, node: str) -> LinkAnswer | None:
        return self._s.node_answers.pop(node, None)

    def checkpoint_found(self, found: Checkpoint | None, lost: LostWork | None) -> None:
        self._s.checkpoint, self._s.lost_work = found, lost

    def checkpoint_saved(self, found: Checkpoint) -> None:
        self._s.saved_since_pend = found

    def granted(self, grant: SpareGrant) -> None:
        self._s.spare_grants[grant.pool] = grant

    def resumed(self, job_id: str) -> None:
        self._s.resumed_job_id = job_id

    # -- the workflow's own helpers ---------------------------------------------------------

    def _take(self, decision: Decision) -> None:
        if self._s.decision is None and not is_terminal(self._s.state):
            self._s.decision = decision
            self.record(self._s.state, f"{decision.verb.value} by {decision.by.who}: {decision.by.reason}")
            if self._straight or workflow.patched("audit-trail"):
                self._audit(AuditAction(decision.verb.value), actor=f"operator:{decision.by.who}",
                            reason=decision.by.reason, origin=decision.by.origin,
                            result=f"taken while {self._s.state}")

    def _audit(self, action: AuditAction, *, actor: str = GOODPUT_ACTOR, nodes: tuple[str, ...] = (),
               reason: str = "", result: str = "", origin: str = "") -> int:
        """Adds an audit record; its index, to settle once the action's result is known."""
        self._s.audit.append(audit_record(len(self._s.audit) + 1, self._start.key, self._s.mode, action,
                                          actor=actor, nodes=nodes, reason=reason, result=result, origin=origin))
        return len(self._s.audit) - 1

    async def _flush_audit(self) -> None:
        """Writes the records not yet in the log; the timeline says when it could not."""
        pending = tuple(self._s.audit[self._s.audit_written:])
        if not pending or not (self._straight or workflow.patched("audit-trail")):
            return
        why_not = await write_audit(pending, local=self._straight)
        if why_not:
            self.record(self._s.state, f"{why_not}; the records stay in this incident's report")
            return
        self._s.audit_written += len(pending)

    def governed(self, mode: Mode) -> None:
        self._s.mode = mode

    def governed_by(self, policy: Policy) -> None:
        self._start = self._start.model_copy(update={"policy": policy})

    def remembered(self, memory: MemoryVerdict | None, early: RuleAutonomy | None = None) -> None:
        self._s.memory, self._early = memory, early

    def planned(self, plan: RecoveryPlan) -> None:
        self._s.plan = plan

    def trusted(self, rule: str) -> None:
        self._s.trust_rule = rule

    def approval_spent(self) -> None:
        self._s.decision = None
