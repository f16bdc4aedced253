"""A straggler named while its job runs keeps the job running: its node is excluded at the job's
next restart (a pending exclusion, kept in node memory for that job alone), not requeued now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.checkpoints import Checkpoint
from goodput.detect.straggler_case import straggler_anomaly_from_cases, straggler_cases
from goodput.diagnose.node_memory import NodeMemoryPolicy, NodeMemoryState, Observation, consult
from goodput.models import ActionKind, Anomaly, AnomalyKind, AnomalySource, Attribution, Category, Culprit, CulpritKind
from goodput.recover.corroboration import corroborate
from goodput.recover.policy import Policy, as_recorded, plan_recovery
from goodput.recover.straggler_plan import (
    StragglerPolicy,
    StragglerRestart,
    lost_per_hour,
    newer_checkpoint,
    pends,
    with_pending,
)
from goodput.scheduler import JobInfo, JobState

NOW = datetime(2026, 12, 4, 9, tzinfo=UTC)
RUNNING = JobInfo(job_id="7", state=JobState.RUNNING, partition="gpu", nodes=("node2", "node3"), requeue=True)
FAILED = RUNNING.model_copy(update={"state": JobState.FAILED})
SLOW_NODE3 = Attribution(category=Category.STRAGGLER, culprits=(Culprit(kind=CulpritKind.NODE, id="node3",
                                                                         confidence=0.9),),
                         drain=True, restart=True, explanation="rank 3 on node3 is 20 % slower")


def straggler(source: AnomalySource = AnomalySource.LOG, lost: float | None = 720.0) -> Anomaly:
    return Anomaly(id=f"s-{source}", source=source, kind=AnomalyKind.STRAGGLER, job_id="7", nodes=("node3",),
                   category=Category.STRAGGLER, observed_at=NOW, detected_at=NOW, lost_s_per_h=lost)


def restarts(plan_kinds: set[ActionKind]) -> bool:
    return bool(plan_kinds & {ActionKind.REQUEUE, ActionKind.RESUBMIT, ActionKind.STOP_JOB})


def test_a_straggler_on_a_running_job_pends_the_exclusion_and_keeps_the_job_running() -> None:
    found = corroborate(SLOW_NODE3, [straggler()], None)
    assert pends(SLOW_NODE3, RUNNING, Policy().straggler, 720.0)
    plan = plan_recovery(SLOW_NODE3, RUNNING, Policy(), found, keep_running=True, lost_s_per_h=720.0)
    assert not restarts({a.kind for a in plan.actions}) and not plan.has(ActionKind.DRAIN_NODES)
    assert plan.pending_exclusion == ("node3",) and plan.suspect_nodes == ("node3",)
    assert "exclude node3 at the job's next restart: it costs 720 s of step time per hour" in plan.rationale


def test_the_agents_gpu_evidence_still_drains_and_the_job_still_runs_on() -> None:
    found = corroborate(SLOW_NODE3, [straggler(), straggler(AnomalySource.GPU)], None)
    plan = plan_recovery(SLOW_NODE3, RUNNING, Policy(), found, keep_running=True, lost_s_per_h=720.0)
    assert plan.nodes_to_drain() == ("node3",) and plan.pending_exclusion == ("node3",)
    assert not restarts({a.kind for a in plan.actions})


def test_a_straggler_without_a_node_is_reported_and_the_job_is_not_stopped() -> None:
    nameless = SLOW_NODE3.model_copy(update={"culprits": (), "drain": False, "restart": False})
    plan = plan_recovery(nameless, RUNNING, Policy(), None, keep_running=True)
    assert [a.kind for a in plan.actions] == [ActionKind.NOTIFY] and plan.pending_exclusion == ()
    # Before pending exclusions, such a plan stopped the running job.
    assert plan_recovery(nameless, RUNNING, Policy()).has(ActionKind.STOP_JOB)


def test_restart_now_requeues_off_the_node_above_the_sites_threshold() -> None:
    now = StragglerPolicy(restart=StragglerRestart.NOW, restart_min_lost_s_per_h=600.0)
    assert not pends(SLOW_NODE3, RUNNING, now, 720.0)
    assert pends(SLOW_NODE3, RUNNING, now, 300.0)
    assert not pends(SLOW_NODE3, RUNNING, StragglerPolicy(restart=StragglerRestart.NOW), None)
    plan = plan_recovery(SLOW_NODE3, RUNNING, Policy(straggler=now))
    assert next(a for a in plan.actions if a.kind is ActionKind.REQUEUE).exclude == ("node3",)


def test_next_checkpoint_pends_until_the_job_saved_a_newer_whole_checkpoint() -> None:
    policy = StragglerPolicy(restart=StragglerRestart.NEXT_CHECKPOINT)
    assert pends(SLOW_NODE3, RUNNING, policy, 720.0)
    assert not pends(SLOW_NODE3, RUNNING, policy, 720.0, saved=True)
    assert pends(SLOW_NODE3, RUNNING, Policy().straggler, 720.0, saved=True)  # `never` ignores checkpoints
    at_100 = Checkpoint(path="/ckpt/step-100", step=100, layout="dcp", complete=True)
    at_300 = at_100.model_copy(update={"path": "/ckpt/step-300", "step": 300})
    assert newer_checkpoint(at_100, at_300) and newer_checkpoint(None, at_300)
    assert not newer_checkpoint(at_100, at_100) and not newer_checkpoint(at_300, at_100)
    assert not newer_checkpoint(at_100, None)
    assert not newer_checkpoint(at_100, at_300.model_copy(update={"complete": False}))  # a save still being written


def test_a_straggler_whose_job_already_ended_restarts_off_the_node() -> None:
    assert not pends(SLOW_NODE3, FAILED, Policy().straggler, 720.0)
    assert not pends(SLOW_NODE3.model_copy(update={"category": Category.GPU_HARDWARE}), RUNNING,
                     Policy().straggler, 720.0)


def test_a_straggler_never_restarts_a_job_that_ended_without_failing() -> None:
    for state in (JobState.COMPLETED, JobState.TIMEOUT, JobState.PREEMPTED, JobState.CANCELLED):
        ended = RUNNING.model_copy(update={"state": state})
        assert pends(SLOW_NODE3, ended, Policy().straggler, 720.0)
        plan = plan_recovery(SLOW_NODE3, ended, Policy(), None, keep_running=True, lost_s_per_h=720.0)
        assert not restarts({a.kind for a in plan.actions}) and plan.pending_exclusion == ("node3",)
        assert f"the job ended {state}" in plan.rationale
        # Before pending exclusions, a straggler verdict requeued it.
        assert plan_recovery(SLOW_NODE3, ended, Policy()).has(ActionKind.REQUEUE)


def test_a_policy_recorded_before_pending_exclusions_restarts_now() -> None:
    old = Policy.model_validate({"mode": "autonomous"})
    assert as_recorded(old).straggler.restart is StragglerRestart.NOW
    assert as_recorded(Policy.model_validate({"straggler": {}})).straggler.restart is StragglerRestart.NEVER


def test_a_later_restart_plan_takes_the_pending_nodes_into_its_exclude_list() -> None:
    crash = Attribution(category=Category.GPU_HARDWARE, culprits=(Culprit(kind=CulpritKind.NODE, id="node2",
                                                                          confidence=0.9),),
                        drain=True, restart=True, explanation="Xid 79 on node2")
    plan = with_pending(plan_recovery(crash, FAILED, Policy()), ("node3",))
    assert next(a for a in plan.actions if a.kind is ActionKind.REQUEUE).exclude == ("node2", "node3")
    assert "excluding node3, pending from this job's straggler verdict" in plan.rationale
    stop = plan_recovery(crash.model_copy(update={"restart": False}), RUNNING, Policy())
    assert with_pending(stop, ("node3",)) == stop  # nothing restarts: nothing to exclude


def _observation(incident: str, job: str, *, pending: tuple[str, ...] = (), at: datetime = NOW) -> Observation:
    return Observation(incident_id=incident, job_id=job, user="u", nodes=("node3",), ambiguous=False, at=at,
                       pending=pending)


def test_the_node_memory_gives_a_pending_exclusion_back_to_that_job_alone() -> None:
    policy = NodeMemoryPolicy()
    state, _ = consult(NodeMemoryState(), _observation("i1", "7", pending=("node3",)), NOW, policy)
    state, other = consult(state, _observation("i2", "8"), NOW, policy)
    assert other.pending == ()  # another job's own evidence never excludes a node from this one
    # The same incident's later consultation (the job failed) replaces its observation, not the pend.
    state, again = consult(state, _observation("i1", "7"), NOW + timedelta(hours=1), policy)
    assert again.pending == ("node3",)
    # A later incident of the same job (another attempt) reads it back too, until the window ends.
    _, later = consult(state, _observation("i3", "7"), NOW + timedelta(days=1), policy)
    assert later.pending == ("node3",)
    _, expired = consult(state, _observation("i4", "7"), NOW + timedelta(seconds=policy.window_s + 7200), policy)
    assert expired.pending == ()


def test_the_straggler_anomaly_carries_the_time_lost_per_hour() -> None:
    times = {r: [1.0 + 0.001 * (i % 3) for i in range(30)] for r in range(8)}
    times[5] = [1.2] * 30  # 20 % slower: 720 s per hour
    cases = straggler_cases(times, {r: f"node{r // 4 + 1}" for r in times})
    found = straggler_anomaly_from_cases(cases, anomaly_id="s1", job_id="7", observed_at=NOW, detected_at=NOW)
    assert found is not None and found.nodes == ("node2",)
    assert found.lost_s_per_h is not None and abs(found.lost_s_per_h - 720.0) < 10
    assert lost_per_hour([found, straggler(lost=100.0)]) == found.lost_s_per_h
    assert lost_per_hour([straggler(lost=None)]) is None
