"""One job's checkpoint interval advice, from what goodput measured about that job.

goodput.checkpoints.advice does the arithmetic from a save cost, a step time, a failure rate and a
GPU count. For `goodput advise --job` and the console those come from different places (the
scheduler's record, the job's checkpoint tree, its watcher, the incidents goodput recorded), and
any of them may be missing: a job that names no checkpoints, a watcher that has seen no step, a
cluster without node faults in the window. So each number here keeps where it came from, and
what could not be measured is said with the flag that supplies it, instead of a silent default:
an interval advised from a guessed MTBF would look as sure as a measured one. Pure; the reading
is workers.job_advice's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import Field

from goodput.checkpoints.advice import Advice, AdviceError, advise, node_faults
from goodput.checkpoints.advice import render as render_advice
from goodput.checkpoints.model import Checkpoint
from goodput.models import Frozen
from goodput.scheduler import JobInfo, NodeInfo
from goodput.service.incidents import IncidentSummary


class Measured(Frozen):
    """A number and where it came from, in words (`measured by the job's watcher over 20 steps`)."""

    value: float
    source: str


class FailureRate(Frozen):
    """Node faults per node-hour, with what it stands on."""

    node_faults: int = Field(ge=0)
    cluster_nodes: int = Field(gt=0)
    window_hours: float = Field(gt=0)
    incidents: int = Field(ge=0)
    # The listing stopped at its limit, so the window was cut to the oldest incident seen.
    shortened: bool = False

    @property
    def per_node_hour(self) -> float:
        return self.node_faults / (self.cluster_nodes * self.window_hours)

    def basis(self) -> str:
        cut = " (cut to the incidents listed)" if self.shortened else ""
        return (f"{self.node_faults} node fault(s) in {_span(self.window_hours)}{cut} on {self.cluster_nodes} "
                f"nodes, from {self.incidents} incident(s)")


class Overrides(Frozen):
    """What the caller gives instead of measuring (the CLI's flags)."""

    step_time_s: float | None = Field(default=None, gt=0)
    gpus: int | None = Field(default=None, gt=0)
    mtbf_hours: float | None = Field(default=None, gt=0)
    cluster_nodes: int | None = Field(default=None, gt=0)
    window: timedelta = timedelta(days=30)
    restart_s: float = Field(default=600.0, ge=0)


class JobAdvice(Frozen):
    cluster: str
    job_id: str
    owner: str = ""
    state: str = ""
    nodes: int = 0
    gpus: Measured | None = None
    checkpoints: str = ""  # how the tree was found and read, or why it was not
    checkpoint_count: int = 0
    step_time: Measured | None = None
    failures: FailureRate | None = None
    mtbf_hours: Measured | None = None
    advice: Advice | None = None
    # What could not be measured, each naming the flag that supplies it.
    missing: tuple[str, ...] = ()
    # Why no interval was advised although nothing was missing (e.g. the saves cost nothing).
    error: str = ""


def _span(hours: float) -> str:
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} h"


def gpus_in_gres(gres: str) -> int | None:
    """GPUs in a node's Slurm gres (`gpu:8`, `gpu:h100:4(S:0-1),gpu:a100:2,nic:1`); None without."""
    total, found = 0, False
    for item in gres.split(","):
        fields = item.split("(", 1)[0].strip().split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit() and len(fields[-1]) <= 6:
            total, found = total + int(fields[-1]), True
    return total if found else None


def job_gpus(job: JobInfo, nodes: Sequence[NodeInfo], gpus_per_node: int) -> Measured | None:
    """The job's GPUs from its nodes' gres when every node says; else the policy's GPUs per node."""
    if not job.nodes:
        return None
    gres = {n.name: gpus_in_gres(n.gres) for n in nodes}
    counts = [gres.get(name) for name in job.nodes]
    if all(c is not None for c in counts):
        return Measured(value=float(sum(c or 0 for c in counts)), source=f"gres of its {len(job.nodes)} node(s)")
    if gpus_per_node <= 0:
        return None
    return Measured(value=float(gpus_per_node * len(job.nodes)),
                    source=f"policy.gpus_per_node ({gpus_per_node}) x {len(job.nodes)} node(s)")


def step_time(watched: Sequence[float], reported: Sequence[float], attempt: int) -> Measured | None:
    """The job's step time: its running watcher's recent steps (median), else the last step time
    an incident of the job recorded."""
    positive = [t for t in watched if t > 0]
    if positive:
        return Measured(value=statistics.median(positive),
                        source=f"median of {len(positive)} step(s) its watcher measured (attempt {attempt})")
    recorded = [t for t in reported if t > 0]
    if recorded:
        return Measured(value=recorded[-1], source="the step time its last incident recorded")
    return None


def failure_rate(incidents: Sequence[IncidentSummary], *, cluster_nodes: int, now: datetime, window: timedelta,
                 limit_reached: bool) -> FailureRate:
    """Node faults over the window. When the listing stopped at its limit, incidents older than
    the oldest one listed were not seen: the window is cut there rather than counted as quiet."""
    start = now - window
    dated = [s.started_at for s in incidents if s.started_at is not None]
    shortened = limit_reached and bool(dated) and min(dated) > start
    if shortened:
        start = min(dated)
    hours = max((now - start).total_seconds() / 3600, 1.0)
    return FailureRate(node_faults=node_faults(incidents, start), cluster_nodes=cluster_nodes,
                       window_hours=hours, incidents=len(incidents), shortened=shortened)


def assemble(job: JobInfo, cluster: str, *, checkpoints: Sequence[Checkpoint], checkpoint_note: str,
             gpus: Measured | None, step: Measured | None, failures: FailureRate | None, failures_note: str,
             overrides: Overrides) -> JobAdvice:
    """The advice from what was gathered; each gap named with the flag that fills it."""
    missing: list[str] = []
    if overrides.step_time_s is not None:
        step = Measured(value=overrides.step_time_s, source="given with --step-time")
    elif step is None:
        missing.append("step time: the job's watcher has measured no step and no incident of it recorded one; "
                       "give --step-time S")
    if overrides.gpus is not None:
        gpus = Measured(value=float(overrides.gpus), source="given with --gpus")
    elif gpus is None:
        missing.append("GPUs: the scheduler names no nodes for the job; give --gpus N")
    nodes = len(job.nodes)
    mtbf: Measured | None = None
    if overrides.mtbf_hours is not None:
        mtbf = Measured(value=overrides.mtbf_hours, source="given with --mtbf-hours")
    elif failures is None:
        missing.append(f"failure rate: {failures_note}; give --mtbf-hours H")
    elif not nodes:
        missing.append("failure rate: the scheduler names no nodes for the job; give --mtbf-hours H")
    elif failures.node_faults == 0:
        missing.append(f"failure rate: no node fault in the window ({failures.basis()}); give --mtbf-hours H "
                       "or a longer --window")
    else:
        mtbf = Measured(value=1 / (failures.per_node_hour * nodes),
                        source=f"{failures.basis()}, x {nodes} node(s) of the job")
    usable = [c for c in checkpoints if c.complete and c.mtime is not None]
    if len(usable) < 2:
        missing.append(f"save cost: needs two valid checkpoints with file times, found {len(usable)} "
                       f"({checkpoint_note}); or run `goodput advise ROOT` on the tree")
    advice: Advice | None = None
    error = ""
    if not missing:
        assert step is not None and gpus is not None and mtbf is not None
        try:
            advice = advise(checkpoints, step_time_s=step.value, mtbf_hours=mtbf.value, gpus=round(gpus.value),
                            restart_s=overrides.restart_s)
        except AdviceError as err:
            error = str(err)
    return JobAdvice(cluster=cluster, job_id=job.job_id, owner=job.user, state=job.state.value, nodes=nodes,
                     gpus=gpus, checkpoints=checkpoint_note, checkpoint_count=len(checkpoints), step_time=step,
                     failures=failures, mtbf_hours=mtbf, advice=advice, missing=tuple(missing), error=error)


def render(a: JobAdvice) -> str:
    """The CLI's text: what it stands on, then the advice or what is missing."""
    def line(label: str, m: Measured | None, unit: str) -> str:
        return f"{label}: {m.value:g}{unit} ({m.source})" if m else f"{label}: not measured"

    lines = [f"job {a.job_id} on {a.cluster}: {a.state or '?'}, {a.nodes} node(s), owner {a.owner or 'unknown'}",
             line("GPUs", a.gpus, ""), line("step time", a.step_time, " s"),
             line("MTBF", a.mtbf_hours, " h"),
             f"checkpoints: {a.checkpoint_count} found; {a.checkpoints}", ""]
    if a.advice is not None:
        return "\n".join(lines) + render_advice(a.advice)
    lines += [f"not measured: {m}" for m in a.missing]
    if a.error:
        lines.append(f"no advice: {a.error}")
    return "\n".join(lines) + "\n"
