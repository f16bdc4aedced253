"""Scheduler signals: job and node state changes between two snapshots, as anomalies.

Slurm says *that* a job died (NODE_FAIL, FAILED with an exit code, TIMEOUT, PREEMPTED,
OUT_OF_MEMORY) and which nodes stopped responding; it rarely says why. These anomalies are
weighed with the log evidence of the same job attempt: a FAILED state is a consequence and never
outranks an Xid line, while a node that went DOWN under a running job names its culprit.

Slurm's NOT_RESPONDING flag is weaker than DOWN: slurmctld sets it on the first message a node's
slurmd fails to answer within MessageTimeout, and clears it at the node's next answer. A slurmd
that is only slow (the node busy launching dozens of jobs) is flagged for seconds; one that is
dead stays flagged until Slurm marks the node DOWN (SlurmdTimeout after its last answer). So a
node that is NOT_RESPONDING without being DOWN counts as dead only once it has stayed so for
`NOT_RESPONDING_HOLD_S`; DOWN and FAIL count at once. Each snapshot carries since when each node
has been flagged, and its own time, for that.
Pure: the scan activity keeps the previous snapshot and calls `changes`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from goodput.diagnose.source_grades import slurm_job_grade, slurm_node_grade
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen, RestartEffect
from goodput.scheduler import ACTIVE_JOB_STATES, NODE_DOWN_WORDS, NODE_NO_ANSWER_WORDS, JobInfo, JobState, NodeInfo

# Terminal job states that deserve an incident, and what each means on its own.
_JOB_ENDINGS: dict[JobState, tuple[AnomalyKind, Category | None]] = {
    JobState.NODE_FAIL: (AnomalyKind.NODE_FAILURE, Category.NODE_FAILURE),
    JobState.FAILED: (AnomalyKind.JOB_FAILED, None),
    JobState.TIMEOUT: (AnomalyKind.JOB_FAILED, Category.SCHEDULER_POLICY),
    JobState.PREEMPTED: (AnomalyKind.JOB_FAILED, Category.SCHEDULER_POLICY),
    JobState.OUT_OF_MEMORY: (AnomalyKind.OOM, Category.OOM),
    JobState.BOOT_FAIL: (AnomalyKind.NODE_FAILURE, Category.NODE_FAILURE),
}
NOT_RESPONDING_HOLD_S = 30.0
"""How long a node must stay NOT_RESPONDING (not DOWN) before a running job's node counts as dead:
longer than a busy slurmd takes to answer again (seconds, MessageTimeout is 10 s by default), well
inside the time a dead one stays flagged before Slurm's DOWN, SlurmdTimeout after its last answer
(3 to 5 minutes in the latency benchmark's node-failure class at Slurm's default 300 s)."""


class Snapshot(Frozen):
    jobs: dict[str, JobInfo] = {}
    nodes: dict[str, NodeInfo] = {}
    taken_at: datetime | None = None
    """None: a snapshot without a time (older checkpoints), whose NOT_RESPONDING counts at once."""
    no_answer_since: dict[str, datetime] = {}
    """Nodes NOT_RESPONDING but not DOWN: the time of the first scan that saw each so, in a row."""


def snapshot(jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], *, at: datetime | None = None,
             previous: Snapshot | None = None) -> Snapshot:
    """The scan taken `at`; a node flagged in `previous` too keeps the time it was first flagged."""
    since: dict[str, datetime] = {}
    if at is not None:
        earlier = previous.no_answer_since if previous is not None else {}
        since = {n.name: earlier.get(n.name, at) for n in nodes if n.says(NODE_NO_ANSWER_WORDS) and not node_down(n)}
    return Snapshot(jobs={j.job_id: j for j in jobs}, nodes={n.name: n for n in nodes}, taken_at=at,
                    no_answer_since=since)


def node_down(node: NodeInfo) -> bool:
    """Slurm's own verdict, DOWN or FAIL: the node is out of service until it returns."""
    return node.says(NODE_DOWN_WORDS)


def silent_for(scan: Snapshot, name: str) -> float | None:
    """Seconds the node has been NOT_RESPONDING without DOWN as of `scan`; None when it is not (or the
    scan has no time)."""
    since = scan.no_answer_since.get(name)
    return None if since is None or scan.taken_at is None else (scan.taken_at - since).total_seconds()


def node_failed(scan: Snapshot, name: str, hold_s: float = NOT_RESPONDING_HOLD_S) -> bool:
    """Dead for the jobs on it: DOWN or FAIL, or NOT_RESPONDING for at least `hold_s`."""
    node = scan.nodes.get(name)
    if node is None or not node.dead:
        return False
    if node_down(node) or scan.taken_at is None:
        return True
    silent = silent_for(scan, name)
    return silent is not None and silent >= hold_s


def _id(*parts: object) -> str:
    return "sched-" + hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:20]


def exit_status(exit_code: str) -> int | None:
    """The exit status of Slurm's `ExitCode=<status>:<signal>` (None when a signal ended it, or unreadable)."""
    status, _, signal = exit_code.partition(":")
    if not (status.isascii() and status.isdigit() and len(status) <= 3) or signal not in ("", "0"):
        return None
    return int(status)


def changes(previous: Snapshot, current: Snapshot, *, cluster: str, now: datetime,
            watched: Mapping[str, JobInfo] | None = None,
            never_restart_exit_codes: Collection[int] = (93,),
            hold_s: float = NOT_RESPONDING_HOLD_S) -> list[Anomaly]:
    """Anomalies for jobs that ended badly and for running jobs whose nodes died since `previous`.

    `watched` limits attention to opted-in jobs (all jobs of `current` when None). The first scan
    of a watcher is a baseline: call this only from the second on, or every job that failed
    within Slurm's MinJobAge would open an incident at start-up.
    """
    scope = watched if watched is not None else current.jobs
    out: list[Anomaly] = []
    for job_id, job in scope.items():
        before = previous.jobs.get(job_id)
        ending = _JOB_ENDINGS.get(job.state)
        # A job first seen already ended started and died between two scans: still ours.
        if ending and (before is None or before.state != job.state or before.restart_count != job.restart_count):
            kind, category = ending
            dead = tuple(n for n in job.nodes if (node := current.nodes.get(n)) is not None and node.dead)
            status = exit_status(job.exit_code) if job.state is JobState.FAILED else None
            never = status is not None and status in never_restart_exit_codes
            nodes = dead if category is Category.NODE_FAILURE else ()
            grade = slurm_job_grade(job.state.value, nodes_named=bool(nodes))
            out.append(Anomaly(
                id=_id(cluster, job_id, job.restart_count, job.state), source=AnomalySource.SCHEDULER,
                kind=kind, cluster=cluster, job_id=job_id, job_attempt=job.restart_count,
                nodes=nodes, category=category, confidence=grade.confidence, rule=grade.rule,
                evidence=[f"slurm: job {job_id} {job.state}"
                          + (f" exit={job.exit_code}" if job.exit_code else "")
                          + (f" reason={job.state_reason}" if job.state_reason else "")
                          + (f" on {','.join(job.nodes)}" if job.nodes else "")
                          + (f"; exit status {status} asks not to be restarted" if never else "")],
                observed_at=now, detected_at=now,
                restart_effect=RestartEffect.NEVER if never else RestartEffect.NONE))
    for name, node in current.nodes.items():
        if not node_failed(current, name, hold_s) or node_failed(previous, name, hold_s):
            continue
        silent = silent_for(current, name)
        held = f" (not responding for {silent:.0f} s)" if silent is not None else ""
        for job_id, job in scope.items():
            if job.state in ACTIVE_JOB_STATES and name in job.nodes:
                grade = slurm_node_grade(node.reason)
                out.append(Anomaly(
                    id=_id(cluster, job_id, job.restart_count, "node", name, node.state),
                    source=AnomalySource.SCHEDULER,
                    kind=AnomalyKind.NODE_FAILURE, cluster=cluster, job_id=job_id, job_attempt=job.restart_count,
                    nodes=(name,), category=Category.NODE_FAILURE, confidence=grade.confidence, rule=grade.rule,
                    evidence=[f"slurm: node {name} {node.state} {' '.join(node.flags)} {node.reason}".strip() + held],
                    observed_at=now, detected_at=now))
    return out


def new_running(previous: Snapshot, current: Snapshot, watched: Mapping[str, JobInfo]) -> list[JobInfo]:
    """Opted-in jobs that (re)started running since the previous snapshot: they need a log watcher."""
    out = []
    for job_id, job in watched.items():
        before = previous.jobs.get(job_id)
        if job.state is JobState.RUNNING and (before is None or before.state is not JobState.RUNNING
                                              or before.restart_count != job.restart_count):
            out.append(job)
    return out
