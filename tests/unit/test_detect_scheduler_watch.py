"""Scheduler signals: job endings and dead nodes between two snapshots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.detect.scheduler_watch import NOT_RESPONDING_HOLD_S, changes, new_running, snapshot
from goodput.diagnose.attribution import attribute
from goodput.models import ActionKind, AnomalyKind, Category, RestartEffect
from goodput.recover.policy import Policy, plan_recovery
from goodput.scheduler import JobInfo, JobState, NodeInfo

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def job(state: JobState, restarts: int = 0, **kw: object) -> JobInfo:
    return JobInfo.model_validate({"job_id": "7", "state": state, "nodes": ("node1", "node2"),
                                   "restart_count": restarts, **kw})


NODES = [NodeInfo(name="node1", state="ALLOCATED"), NodeInfo(name="node2", state="ALLOCATED")]


def test_failed_job_is_a_consequence_without_a_category() -> None:
    before = snapshot([job(JobState.RUNNING)], NODES)
    after = snapshot([job(JobState.FAILED, exit_code="1:0")], NODES)
    [a] = changes(before, after, cluster="lab", now=NOW)
    assert a.kind is AnomalyKind.JOB_FAILED and a.category is None and a.nodes == ()
    assert "exit=1:0" in a.evidence[0]


def test_node_fail_names_the_dead_node() -> None:
    dead = [NODES[0], NodeInfo(name="node2", state="DOWN", flags=("NOT_RESPONDING",))]
    before = snapshot([job(JobState.RUNNING)], NODES)
    after = snapshot([job(JobState.NODE_FAIL)], dead)
    anomalies = changes(before, after, cluster="lab", now=NOW)
    ending = [a for a in anomalies if a.kind is AnomalyKind.NODE_FAILURE and "job 7" in a.evidence[0]]
    assert ending and ending[0].nodes == ("node2",) and ending[0].category is Category.NODE_FAILURE


def test_node_dying_under_a_running_job() -> None:
    before = snapshot([job(JobState.RUNNING, 2)], NODES)
    after = snapshot([job(JobState.RUNNING, 2)], [NODES[0], NodeInfo(name="node2", state="DOWN*")])
    [a] = changes(before, after, cluster="lab", now=NOW)
    assert a.nodes == ("node2",) and a.job_attempt == 2


def test_nothing_changes_nothing_reported_and_timeouts_are_policy() -> None:
    same = snapshot([job(JobState.RUNNING)], NODES)
    assert changes(same, same, cluster="lab", now=NOW) == []
    [a] = changes(same, snapshot([job(JobState.TIMEOUT)], NODES), cluster="lab", now=NOW)
    assert a.category is Category.SCHEDULER_POLICY


def test_only_watched_jobs_count() -> None:
    before = snapshot([job(JobState.RUNNING)], NODES)
    after = snapshot([job(JobState.FAILED)], NODES)
    assert changes(before, after, cluster="lab", now=NOW, watched={}) == []


def test_requeued_job_running_again_needs_a_new_watcher() -> None:
    before = snapshot([job(JobState.RUNNING, 0)], NODES)
    after = snapshot([job(JobState.RUNNING, 1)], NODES)
    assert [j.restart_count for j in new_running(before, after, after.jobs)] == [1]
    assert new_running(after, after, after.jobs) == []


def test_an_exit_status_the_policy_names_means_never_restart() -> None:
    """NVRx's launcher exits 93 after its attribution or no-progress verdict: the job asked to stay down."""
    before = snapshot([job(JobState.RUNNING)], [])
    for code, effect in (("93:0", RestartEffect.NEVER), ("1:0", RestartEffect.NONE), ("0:9", RestartEffect.NONE),
                         ("9" * 400 + ":0", RestartEffect.NONE)):
        [anomaly] = changes(before, snapshot([job(JobState.FAILED, exit_code=code)], []), cluster="c", now=NOW)
        assert anomaly.restart_effect is effect, code
    [custom] = changes(before, snapshot([job(JobState.FAILED, exit_code="42:0")], []), cluster="c", now=NOW,
                       never_restart_exit_codes=(42,))
    assert custom.restart_effect is RestartEffect.NEVER
    assert "exit status 42 asks not to be restarted" in custom.evidence[0]
    plan = plan_recovery(attribute([custom], job(JobState.FAILED)), job(JobState.FAILED), Policy())
    assert {a.kind for a in plan.actions} == {ActionKind.NOTIFY}  # not requeued; nothing left to stop


def _scan_every_2s(flags_per_scan: list[tuple[str, tuple[str, ...]]]) -> list[list[str]]:
    """The watcher's loop over node2's (state, flags) per scan, 2 s apart: each scan's anomalies' evidence."""
    previous, out = None, []
    for i, (state, flags) in enumerate(flags_per_scan):
        at = NOW + timedelta(seconds=2 * i)
        current = snapshot([job(JobState.RUNNING)], [NODES[0], NodeInfo(name="node2", state=state, flags=flags)],
                           at=at, previous=previous)
        if previous is not None:
            out.append([a.evidence[0] for a in changes(previous, current, cluster="lab", now=at)])
        previous = current
    return out


def test_a_slurmd_that_answers_again_within_seconds_is_not_a_dead_node() -> None:
    """The latency run's node3, restored from a node loss and then sent dozens of job launches on a
    loaded machine: slurmctld flags a slurmd that misses one MessageTimeout NOT_RESPONDING and clears
    the flag at its next answer (reproduced on the lab's Slurm 22.05 by SIGSTOPping a slurmd for 25 s).
    Every job on it used to get a node-failure incident and the node a drain."""
    busy = [("ALLOCATED", ())] + [("MIXED", ("NOT_RESPONDING",))] * 5 + [("MIXED", ())] * 3
    assert _scan_every_2s(busy) == [[]] * 8


def test_a_node_that_stays_not_responding_is_dead_once() -> None:
    held = int(NOT_RESPONDING_HOLD_S // 2)
    dead = [("ALLOCATED", ())] + [("ALLOCATED", ("NOT_RESPONDING",))] * (held + 3) + [("DOWN", ("NOT_RESPONDING",))] * 2
    found = _scan_every_2s(dead)
    fired = [i for i, evidence in enumerate(found) if evidence]
    assert fired == [held]  # the first scan NOT_RESPONDING_HOLD_S after the flag, and only that one
    assert found[held] == ["slurm: node node2 ALLOCATED NOT_RESPONDING "
                           f"(not responding for {NOT_RESPONDING_HOLD_S:.0f} s)"]


def test_down_counts_at_once_on_timed_scans() -> None:
    found = _scan_every_2s([("ALLOCATED", ()), ("DOWN", ("NOT_RESPONDING",)), ("DOWN", ("NOT_RESPONDING",))])
    assert found == [["slurm: node node2 DOWN NOT_RESPONDING"], []]
