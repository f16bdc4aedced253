"""The demo cluster's state, and the few scheduling rules the fake scheduler keeps.

Kept apart from goodput.demo.scheduler so that file stays about the Scheduler protocol (queries and
actions, their validation and idempotence) while this one says what the fake cluster is: nodes,
jobs, the journal of what was done to them, and how pending jobs are placed on free healthy nodes
(slurmctld's part, simplified). Reservations (goodput.demo.reservations) add to the same state.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from goodput.demo.reservations import placeable
from goodput.scheduler import (
    ACTIVE_JOB_STATES,
    JobInfo,
    JobState,
    NodeInfo,
    ReservationInfo,
    UnknownJobError,
    UnknownNodeError,
)
from goodput.slurm.dependencies import DependencyError
from goodput.slurm.dependencies import parse as parse_dependency

# The demo cluster's jobs belong to an ordinary user, as real training jobs do.
DEMO_USER, DEMO_UID = "goodput-demo", 64000


class JournalEntry(BaseModel):
    op: str
    target: str
    detail: str = ""


class FakeClusterState(BaseModel):
    nodes: dict[str, NodeInfo] = Field(default_factory=dict)
    jobs: dict[str, JobInfo] = Field(default_factory=dict)
    journal: list[JournalEntry] = Field(default_factory=list)
    next_job_id: int = 5000
    reservations: dict[str, ReservationInfo] = Field(default_factory=dict)
    job_reservations: dict[str, str] = Field(default_factory=dict)  # job id -> its reservation


def demo_cluster(node_count: int = 8, gpus: int = 8) -> FakeClusterState:
    """Eight idle nodes and three two-node training jobs, for `goodput up` and tests."""
    nodes = {f"node{i}": NodeInfo(name=f"node{i}", state="IDLE", gres=f"gpu:{gpus}")
             for i in range(1, node_count + 1)}
    state = FakeClusterState(nodes=nodes)
    for index, job_id in enumerate(("1001", "1002", "1003")):
        members = (f"node{2 * index + 1}", f"node{2 * index + 2}")
        state.jobs[job_id] = JobInfo(job_id=job_id, name=f"train-{job_id}", state=JobState.RUNNING,
                                     partition="gpu", nodes=members, requeue=True,
                                     comment="goodput:opt-in", command="train.sbatch",
                                     user=DEMO_USER, user_id=DEMO_UID, group_id=DEMO_UID)
        for node in members:
            state.nodes[node] = state.nodes[node].model_copy(update={"state": "ALLOCATED"})
    return state


def job_in(s: FakeClusterState, job_id: str) -> JobInfo:
    try:
        return s.jobs[job_id]
    except KeyError:
        raise UnknownJobError(f"unknown job {job_id}") from None


def node_in(s: FakeClusterState, name: str) -> NodeInfo:
    try:
        return s.nodes[name]
    except KeyError:
        raise UnknownNodeError(f"unknown node {name}") from None


def schedule_pending(s: FakeClusterState) -> None:
    """What slurmctld's scheduler does: start pending jobs once healthy nodes are free."""
    for job in list(s.jobs.values()):
        if job.state is JobState.PENDING and not job.held:
            if _waiting(s, job):
                s.jobs[job.job_id] = job.model_copy(update={"state_reason": "Dependency"})
                continue
            nodes = place(s, len(job.nodes) or 1, job.excluded_nodes, freeing=(), job_id=job.job_id)
            if nodes:
                s.jobs[job.job_id] = job.model_copy(update={"state": JobState.RUNNING, "nodes": nodes,
                                                            "state_reason": ""})
            elif not job.state_reason:
                s.jobs[job.job_id] = job.model_copy(update={"state_reason": "Resources"})


def _waiting(s: FakeClusterState, job: JobInfo) -> bool:
    """A job waits while a job it depends on is still queued or running (a simplification of
    Slurm's dependency types: enough for chains in the demo and the tests)."""
    try:
        dependency = parse_dependency(job.dependency)
    except DependencyError:
        return True
    if dependency is None:
        return False
    return any((other := s.jobs.get(target.split("_")[0])) is not None and other.state in ACTIVE_JOB_STATES
               for condition in dependency.conditions for target, _ in condition.targets)


def place(s: FakeClusterState, count: int, exclude: Sequence[str],
           freeing: Sequence[str], job_id: str | None = None) -> tuple[str, ...] | None:
    """Pick healthy nodes for a (re)started job; None when capacity is short."""
    busy = {n for j in s.jobs.values() if j.state is JobState.RUNNING for n in j.nodes}
    busy -= set(freeing)
    healthy = placeable(s, job_id, [n.name for n in s.nodes.values()
                                    if not n.drained and n.name not in exclude and n.name not in busy])
    if len(healthy) < count:
        return None
    return tuple(healthy[:count])
