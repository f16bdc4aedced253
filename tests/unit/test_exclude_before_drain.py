"""Exclude before drain: one job's log alone excludes the node from that job and marks it suspect;
a drain needs a second, independent signal from the node itself."""

from __future__ import annotations

from datetime import UTC, datetime

from goodput.diagnose.node_memory import (
    MemoryVerdict,
    NodeMemoryPolicy,
    NodeMemoryState,
    Observation,
    consult,
    standing,
)
from goodput.models import ActionKind, Anomaly, AnomalyKind, AnomalySource, Attribution, Category, Culprit, CulpritKind
from goodput.recover.corroboration import Signal, corroborate
from goodput.recover.node_health import CheckResult
from goodput.recover.policy import Policy, plan_recovery
from goodput.scheduler import JobInfo, JobState

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
JOB = JobInfo(job_id="7", state=JobState.FAILED, partition="gpu", nodes=("node1", "node2"), requeue=True)
GPU_VERDICT = Attribution(category=Category.GPU_HARDWARE, culprits=(Culprit(kind=CulpritKind.NODE, id="node2",
                                                                            confidence=0.9),),
                          drain=True, restart=True, explanation="Xid 79 on node2")


def anomaly(source: AnomalySource, *nodes: str) -> Anomaly:
    return Anomaly(id=f"a-{source}", source=source, kind=AnomalyKind.GPU_FAULT, job_id="7", nodes=nodes,
                   observed_at=NOW, detected_at=NOW)


def test_a_single_log_verdict_excludes_the_node_and_drains_nothing() -> None:
    found = corroborate(GPU_VERDICT, [anomaly(AnomalySource.LOG, "node2")], None)
    assert (found.drain, found.suspect) == ((), ("node2",))
    plan = plan_recovery(GPU_VERDICT, JOB, Policy(), found)
    assert not plan.has(ActionKind.DRAIN_NODES)
    requeue = next(a for a in plan.actions if a.kind is ActionKind.REQUEUE)
    assert requeue.exclude == ("node2",) and plan.suspect_nodes == ("node2",)
    assert "only the job's log blames it (signals: job-log" in plan.rationale


def test_the_agents_xid_on_the_node_corroborates_the_drain() -> None:
    found = corroborate(GPU_VERDICT, [anomaly(AnomalySource.LOG, "node2"), anomaly(AnomalySource.GPU, "node2")], None)
    assert found.drain == ("node2",) and found.signals["node2"] == (Signal.JOB_LOG, Signal.NODE_AGENT)
    plan = plan_recovery(GPU_VERDICT, JOB, Policy(), found)
    assert plan.nodes_to_drain() == ("node2",) and plan.suspect_nodes == ()
    assert "corroborated (job-log, node-agent)" in plan.rationale


def test_an_agent_xid_on_another_node_does_not_corroborate() -> None:
    found = corroborate(GPU_VERDICT, [anomaly(AnomalySource.LOG, "node2"), anomaly(AnomalySource.GPU, "node1")], None)
    assert found.suspect == ("node2",)


def test_slurm_and_the_node_memory_are_signals_of_their_own() -> None:
    assert corroborate(GPU_VERDICT, [anomaly(AnomalySource.SCHEDULER, "node2")], None).drain == ("node2",)
    assert corroborate(GPU_VERDICT, [anomaly(AnomalySource.LOG, "node2")],
                       MemoryVerdict(witnessed=("node2",))).drain == ("node2",)


def test_without_corroboration_the_plan_is_unchanged() -> None:
    plan = plan_recovery(GPU_VERDICT, JOB, Policy())
    assert plan.nodes_to_drain() == ("node2",) and plan.suspect_nodes == ()


def test_another_jobs_named_failure_or_suspect_mark_is_witnessed_in_memory() -> None:
    policy = NodeMemoryPolicy()
    first = Observation(incident_id="i1", job_id="1", user="alice", nodes=("node2",), ambiguous=False, at=NOW,
                        suspects=("node2",))
    state, verdict = consult(NodeMemoryState(), first, NOW, policy)
    assert verdict.witnessed == ()  # its own observation is no second signal
    assert standing(state, NOW, policy)[0].marked_by == ("i1",)
    second = Observation(incident_id="i2", job_id="2", user="bob", nodes=("node2",), ambiguous=False, at=NOW)
    _, verdict = consult(state, second, NOW, policy)
    assert verdict.witnessed == ("node2",)


def test_a_failed_health_probe_corroborates_but_one_that_could_not_run_does_not() -> None:
    log = [anomaly(AnomalySource.LOG, "node2")]
    failed = corroborate(GPU_VERDICT, log, None, {"node2": CheckResult(passed=False, detail="exit 1: ECC DBE")})
    assert failed.drain == ("node2",) and failed.signals["node2"] == (Signal.JOB_LOG, Signal.HEALTH_PROBE)
    unrun = CheckResult(passed=False, ran=False, detail="timed out after 120 s")
    assert corroborate(GPU_VERDICT, log, None, {"node2": unrun}).suspect == ("node2",)
    assert corroborate(GPU_VERDICT, log, None, {"node2": CheckResult(passed=True)}).suspect == ("node2",)


def test_an_operators_injected_anomaly_is_the_operators_word_not_the_jobs_log() -> None:
    # `goodput inject` (docs/security.md: operators are trusted, who and why recorded): naming a
    # node is the operator's word, a signal of its own beside the job's log, as attribution
    # already trusts it (TRUSTED_NODE_SOURCES); it drains, it is not one more job-log line.
    found = corroborate(GPU_VERDICT, [anomaly(AnomalySource.OPERATOR, "node2")], None)
    assert (found.drain, found.suspect) == (("node2",), ()) and found.signals["node2"] == (Signal.OPERATOR,)
    both = corroborate(GPU_VERDICT, [anomaly(AnomalySource.LOG, "node2"), anomaly(AnomalySource.OPERATOR, "node2")],
                       None)
    assert both.drain == ("node2",) and both.signals["node2"] == (Signal.JOB_LOG, Signal.OPERATOR)
    # Without the patch (incidents started before it), the old reading stays: a job-log line.
    old = corroborate(GPU_VERDICT, [anomaly(AnomalySource.OPERATOR, "node2")], None, operator_word=False)
    assert (old.drain, old.suspect) == ((), ("node2",))
