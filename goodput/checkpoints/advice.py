"""How often a job should checkpoint, from what goodput measured: its save cost and the failure rate.

Detection and action in seconds instead of minutes move a job's effective training time by about a
point; lost work and restart time dominate (docs/benchmarks.md). The one lever a job owner holds is
the checkpoint interval: too rare and every failure redoes hours, too frequent and the saves
themselves eat the run. The Young-Daly interval balances the two from two numbers goodput can
measure, the cost of one save (from the checkpoints' own file times and the job's step time) and
the job's mean time between failures (from incidents that blamed nodes, per node, times the
job's node count). Pure.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from datetime import datetime, timedelta

from goodput.checkpoints.model import Checkpoint
from goodput.models import Category, Frozen
from goodput.service.incidents import IncidentSummary

# Incidents that say a node failed, not the job: what the hardware failure rate counts.
NODE_CATEGORIES = frozenset({Category.GPU_HARDWARE.value, Category.NVLINK.value, Category.NETWORK.value,
                             Category.NODE_FAILURE.value, Category.STORAGE.value})


class AdviceError(ValueError):
    """Not enough measured to advise (say what is missing)."""


def save_cost_s(checkpoints: Sequence[Checkpoint], step_time_s: float) -> float:
    """What one save costs: between consecutive checkpoints, the wall time beyond the training
    steps they are apart (median over the pairs, so one slow save does not decide)."""
    dated = sorted((c for c in checkpoints if c.mtime is not None and c.complete), key=lambda c: c.step)
    overheads = []
    for before, after in itertools.pairwise(dated):
        assert before.mtime is not None and after.mtime is not None
        wall = (after.mtime - before.mtime).total_seconds()
        steps = after.step - before.step
        if steps > 0 and wall > 0:
            overheads.append(max(0.0, wall - steps * step_time_s))
    if not overheads:
        raise AdviceError("need at least two checkpoints with file times, some steps apart")
    return statistics.median(overheads)


def current_interval_s(checkpoints: Sequence[Checkpoint], step_time_s: float) -> float:
    steps = sorted({c.step for c in checkpoints if c.complete})
    gaps = [b - a for a, b in itertools.pairwise(steps) if b > a]
    if not gaps:
        raise AdviceError("need at least two checkpoints to know the current interval")
    return statistics.median(gaps) * step_time_s


def node_failure_rate_per_hour(incidents: Sequence[IncidentSummary], cluster_nodes: int, now: datetime,
                               window: timedelta) -> float:
    """Node failures per node-hour over the window: incidents that blamed nodes for a node fault
    (each fault counted once per node, not once per job it hit)."""
    if cluster_nodes <= 0:
        raise AdviceError("the cluster's node count must be positive")
    return node_faults(incidents, now - window) / (cluster_nodes * window.total_seconds() / 3600)


def node_faults(incidents: Sequence[IncidentSummary], start: datetime) -> int:
    """Node faults since `start`: one per node and hour, however many jobs' incidents blamed it."""
    return len({(s.cluster, node, s.started_at.replace(minute=0, second=0, microsecond=0))
                for s in incidents if s.started_at is not None and s.started_at >= start
                and s.category in NODE_CATEGORIES for node in s.culprit_nodes})


def daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (2006), which Young's sqrt(2CM) approximates when C << M."""
    if mtbf_s <= 0:
        raise AdviceError("the mean time between failures must be positive")
    if cost_s >= 2 * mtbf_s:
        return mtbf_s
    ratio = cost_s / (2 * mtbf_s)
    return math.sqrt(2 * cost_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost_s


def waste_fraction(interval_s: float, cost_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """First-order share of wall time lost: the saves themselves, plus on each failure half an
    interval of redone work and the restart."""
    return min(1.0, cost_s / (interval_s + cost_s) + (interval_s / 2 + restart_s) / mtbf_s)


class Advice(Frozen):
    step_time_s: float
    save_cost_s: float
    mtbf_hours: float
    current_interval_s: float
    advised_interval_s: float
    advised_steps: int
    waste_now: float
    waste_advised: float
    gpus: int
    gpu_hours_saved_per_day: float


def advise(checkpoints: Sequence[Checkpoint], *, step_time_s: float, mtbf_hours: float, gpus: int,
           restart_s: float = 0.0) -> Advice:
    if step_time_s <= 0:
        raise AdviceError("the step time must be positive")
    cost = save_cost_s(checkpoints, step_time_s)
    if cost < step_time_s / 10:
        raise AdviceError(f"the saves cost nothing measurable ({cost:.1f} s beyond the steps between them): "
                          "either they are asynchronous, or --step-time is too high; nothing to balance")
    now = current_interval_s(checkpoints, step_time_s)
    mtbf = mtbf_hours * 3600
    best = daly_interval_s(cost, mtbf)
    waste_now, waste_best = waste_fraction(now, cost, mtbf, restart_s), waste_fraction(best, cost, mtbf, restart_s)
    return Advice(step_time_s=step_time_s, save_cost_s=cost, mtbf_hours=mtbf_hours, current_interval_s=now,
                  advised_interval_s=best, advised_steps=max(1, round(best / step_time_s)), waste_now=waste_now,
                  waste_advised=waste_best, gpus=gpus,
                  gpu_hours_saved_per_day=max(0.0, waste_now - waste_best) * gpus * 24)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def render(a: Advice) -> str:
    """The advice as the lines `goodput advise` and `goodput advise --job` print, the numbers first."""
    return "\n".join([
        f"save cost (measured): {a.save_cost_s:.0f} s per checkpoint, at {a.step_time_s:g} s per step",
        f"mean time between failures for this job: {a.mtbf_hours:.1f} h",
        f"checkpoint now every {_duration(a.current_interval_s)}: {a.waste_now:.1%} of the run lost "
        "(saves plus redone work)",
        f"advised (Young-Daly): every {_duration(a.advised_interval_s)} = {a.advised_steps} steps: "
        f"{a.waste_advised:.1%} lost",
        f"on {a.gpus} GPUs that saves {a.gpu_hours_saved_per_day:.1f} GPU-hours a day",
        "",
    ])
