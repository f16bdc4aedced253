"""Lost work: the training redone because a failure sent a job back to its last checkpoint.

    iterations = max(0, last_progress_iteration - checkpoint_iteration)   (no checkpoint: from 0)
    seconds    = iterations * step_time_s
    gpu_hours  = seconds * nodes * gpus_per_node / 3600

Pure arithmetic so reports, the simulator and dashboards agree on one formula; the sums group it
per job and per cluster over many incidents.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from goodput.checkpoints.model import Checkpoint, LostWork
from goodput.models import Anomaly, Cluster, Frozen, JobId
from goodput.scheduler import JobInfo


def lost_work(last_progress_iteration: int, checkpoint_iteration: int | None, step_time_s: float,
              nodes: int, gpus_per_node: int) -> LostWork:
    if step_time_s < 0 or nodes < 0 or gpus_per_node < 0 or last_progress_iteration < 0:
        raise ValueError("iterations, step time, nodes and GPUs per node cannot be negative")
    iterations = max(0, last_progress_iteration - (checkpoint_iteration or 0))
    seconds = iterations * step_time_s
    return LostWork(iterations=iterations, seconds=seconds, gpu_hours=seconds * nodes * gpus_per_node / 3600.0)


class IncidentLoss(Frozen):
    """The lost work of one incident of one job."""

    cluster: Cluster = "default"
    job_id: JobId
    incident_id: str = ""
    lost: LostWork


class LostWorkSummary(Frozen):
    total: LostWork = Field(default_factory=LostWork)
    by_cluster: dict[str, LostWork] = Field(default_factory=dict)
    # cluster → job id → lost work
    by_job: dict[str, dict[str, LostWork]] = Field(default_factory=dict)
    incidents: int = 0


def summarize_lost_work(losses: Iterable[IncidentLoss]) -> LostWorkSummary:
    total = LostWork()
    by_cluster: dict[str, LostWork] = {}
    by_job: dict[str, dict[str, LostWork]] = {}
    count = 0
    for loss in losses:
        count += 1
        total = total + loss.lost
        by_cluster[loss.cluster] = by_cluster.get(loss.cluster, LostWork()) + loss.lost
        jobs = by_job.setdefault(loss.cluster, {})
        jobs[loss.job_id] = jobs.get(loss.job_id, LostWork()) + loss.lost
    return LostWorkSummary(total=total, by_cluster=by_cluster, by_job=by_job, incidents=count)


def lost_work_of(anomalies: Iterable[Anomaly], checkpoint: Checkpoint | None, job: JobInfo | None,
                 policy_gpus_per_node: int) -> LostWork | None:
    """An incident's lost work from its anomalies' last progress step; None when none reported one."""
    steps = [a.progress_step for a in anomalies if a.progress_step is not None]
    times = [a.step_time_s for a in anomalies if a.step_time_s]
    if not steps:
        return None
    nodes = len(job.nodes) if job and job.nodes else 1
    return lost_work(max(steps), checkpoint.step if checkpoint else None, times[-1] if times else 0.0,
                     nodes, policy_gpus_per_node)
