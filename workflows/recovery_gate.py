"""The mode gate: whether an incident's plan is carried out, and the operator's word when it waits.

Every plan passes here before it acts: evidence only recommends and waits for better evidence;
monitor mode and the kill switch recommend; a rule's track record may lower an autonomous
partition to approve or monitor for this incident (earned autonomy); approve mode waits for an
operator, and so does a drain past a switch's or rack's limit, whatever the mode. Both waits
share one rule: a decision must come within the policy's approval timeout, a cancel wins, and a
kill switch engaged while the incident waited wins over the approval. An incident a reporter
opened takes the service's policy and mode first (`service_policy`). Step functions of
RecoveryWorkflow (workflows.recovery_steps): the workflow's own methods change its state.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.models import ActionKind, Mode, RecoveryPlan
    from goodput.recover.incident import AttributeResult, DecisionVerb, RecoveryStart
    from goodput.recover.kill_switch import KillSwitchState, effective_mode
    from goodput.recover.lifecycle import IncidentState
    from goodput.recover.policy import Policy, governing_mode
    from goodput.recover.recovery_rules import expedite_hold_note
    from goodput.recover.trust import incident_mode
    from workflows.node_link import recommend
    from workflows.recovery_actions import expedite_held
    from workflows.recovery_steps import CancelledByOperator, Escalation, Incident
    from workflows.recovery_trust import recommended

S = IncidentState


async def may_act(wf: Incident, attributed: AttributeResult, plan: RecoveryPlan) -> bool:
    """Whether the plan is carried out: not on evidence only, not in monitor mode or under
    the kill switch (then it is recommended), and in approve mode only once approved."""
    start = wf.start
    if attributed.evidence_only and (wf.straight or workflow.patched("pushed-output-checked")):
        # Whatever the mode: lines goodput could not tie to the job's own output are reported only.
        said = f"evidence only ({attributed.evidence_only}): recommended — {plan.rationale}"
        if start.policy.evidence_only_wait_s > 0:
            wf.move(S.AWAITING_EVIDENCE, f"{said}; waiting for evidence goodput may act on")
            wf.upsert()  # listed as open, in its own state, like one awaiting approval
        else:
            wf.move(S.RECOMMENDED_ONLY, said)
        await wf.notify(f"recommendation (unverified pushed evidence): {plan.rationale}")
        return False
    if wf.incident.mode is not Mode.MONITOR and (wf.straight or workflow.patched("kill-switch")):
        mode, why = effective_mode(wf.incident.mode, await _switch(wf))
        wf.governed(mode)
        if why:
            wf.record(wf.incident.state, why)
    if wf.straight or workflow.patched("trust-record"):
        await _earned(wf, attributed)
    if wf.incident.mode is Mode.MONITOR:
        await recommend(wf)
        wf.move(S.RECOMMENDED_ONLY, f"monitor mode: recommended — {plan.rationale}")
        if (held := expedite_held(attributed, patches_first=wf.patches_first)) is not None:
            restart = plan.has(ActionKind.REQUEUE) or plan.has(ActionKind.RESUBMIT)
            wf.record(S.RECOMMENDED_ONLY, expedite_hold_note(held, restart=restart, acting=False))
        await wf.notify(f"recommendation: {plan.rationale}")
        return False
    if wf.incident.mode is Mode.APPROVE:
        return await _approved(wf, plan)
    return True


async def _switch(wf: Incident) -> KillSwitchState:
    """Reads the cluster's kill switch now (the consult_kill_switch step)."""
    return await wf.step("consult_kill_switch", wf.start.key.cluster, KillSwitchState)


async def _earned(wf: Incident, attributed: AttributeResult) -> None:
    """Records the recommendation with its rule's track record; an autonomous partition acts
    alone only when the rule earned it (or an operator pinned it) and the verdict is high."""
    answer = await recommended(wf, attributed)
    if answer is None:
        return
    wf.trusted(answer.rule)
    mode, why = incident_mode(wf.incident.mode, answer.level, answer.why, pinned=answer.pinned,
                              confidence=attributed.attribution.confidence, bar=wf.start.policy.autonomy)
    if mode is not wf.incident.mode:
        wf.governed(mode)
        wf.record(wf.incident.state, f"{mode} mode for this incident: {why}")
        wf.upsert()


async def _approved(wf: Incident, plan: RecoveryPlan) -> bool:
    """Waits for an operator's decision; True when approved and the kill switch still off."""
    wf.move(S.AWAITING_APPROVAL, "waiting for an operator to approve or cancel")
    wf.upsert()
    await wf.notify(f"approval needed: {plan.rationale}")
    return await _decided(wf, "", consult_switch=wf.straight or workflow.patched("kill-switch"))


async def past_limit(wf: Incident, why: str) -> None:
    """A drain past a switch's or rack's limit: whatever the mode, an operator decides. An
    approval of the plan (approve mode) did not approve this, so it is asked for again."""
    decision = wf.incident.decision
    if decision is not None and decision.verb is DecisionVerb.APPROVE:
        wf.approval_spent()
    if wf.incident.state is S.AWAITING_APPROVAL:
        # The plan's approval is answered first (the `decide` update returns on a new state),
        # while the notification goes out; then the drain is asked for on its own.
        wf.move(S.ISOLATING, f"{why}; the plan's approval does not cover a drain past this limit")
    await wf.notify(f"approval needed: {why}")
    wf.move(S.AWAITING_APPROVAL, f"{why}; approve to drain anyway, or cancel")
    wf.upsert()
    if not await _decided(wf, f"{why}; ", consult_switch=True):
        raise CancelledByOperator


async def _decided(wf: Incident, context: str, *, consult_switch: bool) -> bool:
    """The one wait for an operator: True when approved, False when cancelled; Escalation when no
    decision came in time, or when the kill switch engaged while the incident waited (it wins)."""
    timeout_s = wf.start.policy.approval_timeout_s
    if not await wf.wait(lambda: wf.incident.decision is not None, timeout_s):
        raise Escalation(f"{context}no decision within {timeout_s:.0f}s")
    if wf.cancelled_here():
        return False
    if consult_switch:
        _, engaged = effective_mode(wf.incident.mode, await _switch(wf))
        if engaged:
            raise Escalation(f"approved, but not carried out: {engaged}")
    return True


async def service_policy(wf: Incident) -> RecoveryStart:
    """A reporter that is not the service opened this incident: the policy of the worker that
    runs it governs, not the reporter's. Only starts that say so take this step, and none
    recorded before it existed does, so no `workflow.patched` is needed."""
    policy = await wf.step("service_policy", wf.start.key.cluster, Policy)
    wf.governed_by(policy)
    mode = wf.start.mode
    wf.governed(governing_mode(policy.mode, mode))
    wf.record(S.DETECTED, f"the service's policy governs: {wf.incident.mode} mode until the job's partition "
                          "is known" + (f" (asked for {mode})" if mode else ""))
    wf.upsert()
    return wf.start
