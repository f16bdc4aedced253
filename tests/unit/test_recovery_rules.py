"""The recovery workflow's pure decisions and its report, without Temporal (goodput.recover.recovery_rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from goodput.checkpoints import Checkpoint, LostWork
from goodput.diagnose.node_memory import MemoryVerdict, NodeStanding
from goodput.models import (
    Anomaly,
    AnomalyKind,
    AnomalySource,
    Attribution,
    Category,
    IncidentKey,
    Mode,
    OperatorDecision,
    RestartEffect,
)
from goodput.recover.incident import AttributeResult, Decision, DecisionVerb, IsolateResult, ResumeResult
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_incident import LinkAnswer, Role
from goodput.recover.policy import Policy
from goodput.recover.recovery_rules import (
    cancel_requested,
    decide_refusal,
    drained_note,
    ending_by_itself,
    follows_in_job,
    leading,
    link_evidence,
    memory_unavailable,
    memory_weighed,
    observed_at,
    pool_grant,
    resume_environment,
    room_for,
    verify_input,
    verify_timeout_s,
)
from goodput.recover.recovery_state import RecoveryState, incident_report
from goodput.recover.spares import SpareGrant, SparePolicy
from goodput.scheduler import JobInfo, JobState

S = IncidentState
T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
KEY = IncidentKey(cluster="c1", job_id="1001", job_attempt=0)
BY = OperatorDecision(who="ops", reason="checked")
APPROVE = Decision(verb=DecisionVerb.APPROVE, by=BY)
CANCEL = Decision(verb=DecisionVerb.CANCEL, by=BY)


def anomaly(n: int, *, minutes: float = 0, evidence: tuple[str, ...] = ()) -> Anomaly:
    at = T0 + timedelta(minutes=minutes)
    return Anomaly(id=f"a{n}", source=AnomalySource.LOG, kind=AnomalyKind.GPU_FAULT, job_id="1001",
                   evidence=list(evidence), observed_at=at, detected_at=at)


def job(state: JobState = JobState.RUNNING, *, partition: str = "gpu", user: str = "alice") -> JobInfo:
    return JobInfo(job_id="1001", name="train", state=state, partition=partition, nodes=("n1", "n2"), user=user)


def attributed(effect: RestartEffect = RestartEffect.NONE, job_info: JobInfo | None = None) -> AttributeResult:
    return AttributeResult(attribution=Attribution(category=Category.GPU_HARDWARE, explanation="xid 79",
                                                   restart_effect=effect), job=job_info)


# -- evidence ---------------------------------------------------------------------------------


def test_room_keeps_anomalies_until_the_evidence_is_full() -> None:
    assert room_for([anomaly(1)], set(), limit=2).keep


def test_a_full_evidence_gives_way_from_its_oldest_set_aside_anomaly() -> None:
    kept = [anomaly(1), anomaly(2), anomaly(3)]
    room = room_for(kept, {"a3", "a2"}, limit=3)
    assert room.keep and room.evict == 1


def test_a_full_evidence_with_nothing_set_aside_counts_the_new_anomaly_without_keeping_it() -> None:
    room = room_for([anomaly(1), anomaly(2)], {"other"}, limit=2)
    assert not room.keep and room.evict is None


def test_observed_at_is_the_earliest_anomaly_and_none_without_any() -> None:
    assert observed_at([anomaly(1, minutes=5), anomaly(2, minutes=1)]) == T0 + timedelta(minutes=1)
    assert observed_at([]) is None


def test_a_node_incident_hears_the_explanation_and_the_first_line_of_three_anomalies() -> None:
    anomalies = [anomaly(n, evidence=(f"line {n}", "second")) for n in range(5)]
    assert link_evidence(KEY, attributed(), anomalies) == ("job 1001: xid 79", "line 0", "line 1", "line 2")
    assert link_evidence(KEY, None, []) == ("job 1001: not attributed",)


# -- operator decisions -----------------------------------------------------------------------


def test_only_a_cancel_requests_cancelling() -> None:
    assert cancel_requested(CANCEL)
    assert not cancel_requested(APPROVE) and not cancel_requested(None)


def test_decide_refuses_a_closed_incident_a_second_decision_and_an_approval_of_nothing() -> None:
    closed = decide_refusal(S.RECOVERED, Mode.AUTONOMOUS, None, CANCEL)
    assert closed is not None and closed.type == "IncidentClosed"
    again = decide_refusal(S.AWAITING_APPROVAL, Mode.APPROVE, CANCEL, APPROVE)
    assert again is not None and again.type == "AlreadyDecided" and "cancel by ops" in again.message
    nothing = decide_refusal(S.PLANNED, Mode.AUTONOMOUS, None, APPROVE)
    assert nothing is not None and nothing.type == "NotAwaitingApproval"


def test_decide_takes_a_cancel_at_any_open_state_and_an_approval_in_approve_mode() -> None:
    assert decide_refusal(S.RESUMING, Mode.AUTONOMOUS, None, CANCEL) is None
    assert decide_refusal(S.PLANNED, Mode.APPROVE, None, APPROVE) is None
    assert decide_refusal(S.AWAITING_APPROVAL, Mode.AUTONOMOUS, None, APPROVE) is None


# -- acting on the job ------------------------------------------------------------------------


def test_a_running_job_that_asked_not_to_be_restarted_gets_its_grace() -> None:
    running = job()
    assert ending_by_itself(attributed(RestartEffect.NEVER, running), 30) == running


@pytest.mark.parametrize(("effect", "state", "grace"), [
    (RestartEffect.NONE, JobState.RUNNING, 30),  # it did not ask
    (RestartEffect.NEVER, JobState.FAILED, 30),  # it ended already
    (RestartEffect.NEVER, JobState.RUNNING, 0),  # the policy gives no grace
])
def test_no_grace_otherwise(effect: RestartEffect, state: JobState, grace: float) -> None:
    assert ending_by_itself(attributed(effect, job(state)), grace) is None
    assert ending_by_itself(attributed(RestartEffect.NEVER, None), 30) is None


def test_the_incident_follows_an_in_job_restart_only_when_the_policy_gives_it_a_window() -> None:
    in_job = attributed(RestartEffect.IN_JOB).attribution
    assert follows_in_job(in_job, Policy(in_job_follow_s=60))
    assert not follows_in_job(in_job, Policy(in_job_follow_s=0))
    assert not follows_in_job(attributed().attribution, Policy(in_job_follow_s=60))


def test_node_memory_that_changes_nothing_still_leaves_its_note() -> None:
    mine = attributed().attribution
    noted = memory_weighed(mine, MemoryVerdict(note="n1 seen once"), job())
    assert noted.explanation == "xid 79; node memory: n1 seen once"
    assert memory_weighed(mine, MemoryVerdict(), job()) == mine
    assert memory_unavailable(mine, "down").explanation == "xid 79; node memory unavailable (down)"


def test_node_memory_that_names_a_suspect_replaces_the_note_with_its_own_verdict() -> None:
    unsure = Attribution(category=Category.NCCL_TIMEOUT, explanation="nccl")
    suspect = NodeStanding(node="n1", score=2.0, jobs=("1", "2"), users=("alice", "bob"), last_at=T0, suspect=True)
    weighed = memory_weighed(unsure, MemoryVerdict(suspects=(suspect,), note="two users"), job())
    assert weighed.drain and weighed.explanation.count("node memory") == 1


def test_a_resume_from_a_checkpoint_tells_the_job_where_and_verifies_progress_past_it() -> None:
    checkpoint = Checkpoint(path="/ckpt/step_400", step=400, layout="torch", complete=True)
    assert resume_environment(checkpoint) == {"GOODPUT_RESUME_FROM": "/ckpt/step_400", "GOODPUT_RESUME_STEP": "400"}
    assert resume_environment(None) == {}
    policy = Policy(verify_running_timeout_s=20, capacity_wait_s=5, verify_progress_timeout_s=100)
    resumed = ResumeResult(job_id="1002", changed=True, log_offsets={"/out": 7})
    verify = verify_input(resumed, "1001", 3, policy, checkpoint)
    assert (verify.job_id, verify.same_job, verify.progress_past) == ("1002", False, 400)
    assert verify.log_offsets == {"/out": 7}
    assert verify_input(resumed, "1002", 3, policy, None).progress_past is None
    assert verify_timeout_s(policy, checkpoint) == 185 and verify_timeout_s(policy, None) == 85


def test_the_spare_pool_grant_is_asked_about_once_for_a_job_it_applies_to() -> None:
    spares = SparePolicy(reservation="spares", partitions=("gpu",))
    assert pool_grant(spares, job(), {}) == SpareGrant(pool="spares", user="alice")
    assert pool_grant(spares, job(), {"spares": SpareGrant(pool="spares", user="alice")}) is None
    assert pool_grant(spares, job(partition="cpu"), {}) is None
    assert pool_grant(spares, job(user=""), {}) is None
    assert pool_grant(spares, None, {}) is None


# -- isolating nodes --------------------------------------------------------------------------


def test_this_incident_leads_the_nodes_it_was_given_the_lead_of_or_could_not_link() -> None:
    def answer(role: Role) -> LinkAnswer:
        return LinkAnswer(node_incident_id="node-incident/c1/x", role=role)
    answers = {"n1": answer(Role.LEAD), "n2": None, "n3": answer(Role.JOIN), "n4": answer(Role.WAIT)}
    assert leading(answers) == ("n1", "n2")


def test_the_drain_note_says_what_was_drained_and_what_already_was() -> None:
    assert drained_note(IsolateResult(drained=("n1",), already=("n2",))) == "drained n1; already drained: n2"
    assert drained_note(IsolateResult()) == "drained nothing new"


# -- the report -------------------------------------------------------------------------------


def test_the_report_shows_the_state_the_workflow_keeps() -> None:
    s = RecoveryState(mode=Mode.APPROVE, state=S.CANCELLED, anomalies=[anomaly(1)], anomaly_count=3,
                      decision=CANCEL, attributed=attributed(job_info=job()), resumed_job_id="1002",
                      actions_done=["drained n1"], node_incidents=["node-incident/c1/n1"],
                      lost_work=LostWork(iterations=5))
    report = incident_report("incident-1", KEY, s)
    assert (report.state, report.mode, report.anomaly_count, report.decision_verb) == (
        S.CANCELLED, Mode.APPROVE, 3, "cancel")
    assert report.outcome is not None and report.decision == BY and report.job == job()
    assert report.attribution is not None and report.attribution.explanation == "xid 79"
    assert report.actions_done == ("drained n1",) and report.node_incidents == ("node-incident/c1/n1",)
    assert report.lost_work == LostWork(iterations=5) and report.resumed_job_id == "1002"
    empty = incident_report("incident-2", KEY, RecoveryState(mode=Mode.MONITOR))
    assert empty.state is S.DETECTED and empty.attribution is None and empty.outcome is None
