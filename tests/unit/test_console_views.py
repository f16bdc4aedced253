"""What the console tells an operator, decided from incidents as data: the effects of approving,
deadlines, failed attempts that a later success must not bury, the why-didn't-it-recover ladder,
lemon nodes, modes under the kill switch, and filters that cannot widen their query."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from goodput.console.filters import FilterError, IncidentFilter
from goodput.console.views import (
    approval_deadline,
    earlier_failures,
    gpu_hours_saved,
    job_rows,
    node_grid,
    partition_modes,
    planned_effects,
    recovery_ladder,
    state_counts,
    step_durations,
)
from goodput.models import (
    ActionKind,
    Category,
    IncidentKey,
    Mode,
    OperatorDecision,
    RecoveryAction,
    RecoveryPlan,
)
from goodput.recover.incident import IncidentReport, TimelineEvent
from goodput.recover.kill_switch import KillSwitchState, switch
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.service.incidents import IncidentSummary

S = IncidentState
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
KEY = IncidentKey(cluster="c1", job_id="1001", job_attempt=0)
DRAIN_AND_REQUEUE = RecoveryPlan(rationale="xid 79: drain node2, then requeue", actions=(
    RecoveryAction(kind=ActionKind.DRAIN_NODES, nodes=("node2",)),
    RecoveryAction(kind=ActionKind.REQUEUE, exclude=("node2",)),
    RecoveryAction(kind=ActionKind.NOTIFY)))


def report(state: IncidentState, *, plan: RecoveryPlan | None = DRAIN_AND_REQUEUE, actions: tuple[str, ...] = (),
           timeline: tuple[tuple[IncidentState, int, str], ...] = (), mode: Mode = Mode.APPROVE) -> IncidentReport:
    return IncidentReport(incident_id="inc-1", key=KEY, state=state, mode=mode, plan=plan, anomaly_count=1,
                          actions_done=actions, timeline=tuple(
                              TimelineEvent(at=T0 + timedelta(seconds=s), state=st, detail=d)
                              for st, s, d in timeline))


def summary(incident: str, state: str, minutes: int, job: str = "1001", nodes: tuple[str, ...] = ()
            ) -> IncidentSummary:
    return IncidentSummary(incident_id=incident, job_id=job, cluster="c1", state=state, culprit_nodes=nodes,
                           started_at=T0 + timedelta(minutes=minutes), running=state not in
                           ("recovered", "escalated", "cancelled", "stopped", "recommended-only"))


def test_approving_says_exactly_what_happens_to_the_cluster() -> None:
    assert planned_effects(DRAIN_AND_REQUEUE, "1001") == [
        "drain node2 (Slurm drain with goodput's reason)", "requeue job 1001", "notify"]
    resubmit = RecoveryPlan(rationale="r", actions=(RecoveryAction(kind=ActionKind.RESUBMIT, exclude=("n1", "n2")),))
    assert planned_effects(resubmit, "7") == ["resubmit job 7 as its owner, excluding n1, n2"]
    assert planned_effects(RecoveryPlan(rationale="r", actions=()), "7") == ["nothing on the cluster (notify only)"]
    assert planned_effects(None, "7") == ["nothing: no plan yet"]


def test_the_deadline_counts_from_when_the_incident_started_waiting() -> None:
    waiting = report(S.AWAITING_APPROVAL, timeline=((S.DETECTED, 0, ""), (S.AWAITING_APPROVAL, 30, "")))
    assert approval_deadline(waiting, Policy(approval_timeout_s=600)) == T0 + timedelta(seconds=630)
    assert approval_deadline(report(S.RECOVERED), Policy()) is None


def test_each_state_lasts_until_the_next_and_the_last_is_still_running() -> None:
    rows = step_durations(report(S.VERIFYING, timeline=((S.DETECTED, 0, "a"), (S.ISOLATING, 2, "b"),
                                                         (S.VERIFYING, 7, "c"))))
    assert [(state, secs) for state, _, secs, _ in rows] == [("detected", 2.0), ("isolating", 5.0),
                                                             ("verifying", None)]


def test_a_retry_that_recovered_keeps_the_failed_attempts_before_it_visible() -> None:
    rows = [summary("a", "escalated", 0), summary("b", "cancelled", 5), summary("c", "recovered", 9),
            summary("x", "escalated", 1, job="2002")]
    assert earlier_failures(rows) == {"a": 0, "b": 1, "c": 2, "x": 0}
    counts = state_counts(rows)
    assert counts["escalated"] == 2 and counts["recovered"] == 1 and counts["detected"] == 0
    job = {r.job_id: r for r in job_rows(rows)}["1001"]
    assert (job.incidents, job.failed, job.recovered, job.last_state) == (3, 2, 1, "recovered")


def test_the_ladder_names_the_first_rung_that_failed() -> None:
    def first_failed(r: IncidentReport | None, seen: bool = True) -> tuple[str, str] | None:
        rung = next((x for x in recovery_ladder("1001", seen, r) if x.passed is False), None)
        return None if rung is None else (rung.name, rung.detail)

    assert first_failed(None, seen=False) == ("job seen", "no watcher reported job 1001: is it opted in "
                                                          "(goodput:... in its comment)?")
    assert first_failed(None)[0] == "signal seen"  # type: ignore[index]
    assert first_failed(report(S.RECOMMENDED_ONLY, mode=Mode.MONITOR)) == (
        "gate", "monitor mode: goodput recommended and did not act")
    notify_only = RecoveryPlan(rationale="application error: the job's own bug", actions=(
        RecoveryAction(kind=ActionKind.NOTIFY),))
    assert first_failed(report(S.RECOMMENDED_ONLY, plan=notify_only)) == (
        "plan", "the plan takes no action: application error: the job's own bug")
    cancelled = report(S.CANCELLED).model_copy(update={"decision": OperatorDecision(who="bob", reason="maint")})
    assert first_failed(cancelled) == ("gate", "cancelled by bob: maint")
    no_progress = report(S.ESCALATED, actions=("drained node2", "requeued 1001"),
                         timeline=((S.VERIFYING, 0, ""), (S.ESCALATED, 900, "no progress past step 400 in 900 s")))
    assert first_failed(no_progress) == ("verification", "no progress past step 400 in 900 s")
    recovered = recovery_ladder("1001", True, report(S.RECOVERED, actions=("requeued 1001",)))
    assert all(r.passed for r in recovered)
    waiting = recovery_ladder("1001", True, report(S.AWAITING_APPROVAL))
    assert [r.passed for r in waiting][-3:] == [False, None, None]


def test_the_kill_switch_holds_every_partition_in_monitor_mode() -> None:
    policy = Policy(mode=Mode.APPROVE, partition_modes={"gpu": Mode.AUTONOMOUS, "debug": Mode.MONITOR})
    released = partition_modes(policy, KillSwitchState())
    assert [(m.partition, m.effective) for m in released] == [
        ("(default)", Mode.APPROVE), ("debug", Mode.MONITOR), ("gpu", Mode.AUTONOMOUS)]
    engaged = switch(KillSwitchState(), True, OperatorDecision(who="ann", reason="storm"), T0)
    modes = partition_modes(policy, engaged)
    assert {m.effective for m in modes} == {Mode.MONITOR}
    assert "ann" in modes[2].why and modes[2].configured is Mode.AUTONOMOUS


def test_lemon_nodes_lead_the_grid() -> None:
    rows = [summary(f"i{n}", "recovered", n * 24 * 60, nodes=("node7",)) for n in range(3)]
    rows += [summary("j", "recovered", 0, nodes=("node2", "node7")), summary("old", "recovered", -30 * 24 * 60,
                                                                             nodes=("node9",))]
    grid = node_grid(rows, T0 + timedelta(days=2), days=14)
    assert [node for node, _ in grid] == ["node7", "node2"]
    assert grid[0][1][-3:] == [2, 1, 1] and sum(grid[0][1]) == 4


def test_filters_take_only_their_vocabulary_and_round_trip_as_a_url() -> None:
    flt = IncidentFilter.from_params({"state": "awaiting-approval", "node": "gpu-node07", "job": "123_4",
                                      "category": "gpu-hardware", "since": "24h", "open": "1", "page_size": "100"})
    assert flt.state is S.AWAITING_APPROVAL and flt.category is Category.GPU_HARDWARE and flt.open_only
    assert IncidentFilter.from_params(dict(pair.split("=") for pair in flt.as_params().split("&"))) == flt
    assert IncidentFilter.from_params({}).is_empty() and not flt.is_empty()
    for hostile in ({"node": "a' OR 'x'='x"}, {"cluster": "c1'"}, {"job": "1 OR 1"}, {"state": "any"},
                    {"page_size": "100000"}, {"since": "last tuesday"}, {"mode": "root"}):
        with pytest.raises(FilterError):
            IncidentFilter.from_params(hostile)


def test_gpu_hours_saved_compare_the_downtime_with_a_manual_recovery() -> None:
    from goodput.models import Anomaly, AnomalyKind, AnomalySource
    from goodput.scheduler import JobInfo, JobState

    seen = Anomaly(id="a1", source=AnomalySource.LOG, kind=AnomalyKind.CRASH, job_id="1001", observed_at=T0,
                   detected_at=T0)
    done = report(S.RECOVERED, timeline=((S.DETECTED, 0, ""), (S.RECOVERED, 600, ""))).model_copy(update={
        "anomalies": (seen,), "job": JobInfo(job_id="1001", state=JobState.RUNNING, nodes=("n1", "n2"))})
    policy = Policy(gpus_per_node=8)
    assert gpu_hours_saved(done, policy, manual_recovery_s=3600) == pytest.approx(16 * 50 / 60)
    assert gpu_hours_saved(done, policy, manual_recovery_s=300) == 0.0  # slower than the baseline
    assert gpu_hours_saved(report(S.ESCALATED), policy, 3600) is None
