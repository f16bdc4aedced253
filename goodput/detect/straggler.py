"""Straggler detection: one rank (and so its GPU or node) slows every collective down.

Each rank's median step time over a window, then the robust statistic shared with the offline
diagnosis (`goodput.robust`: median and MAD across ranks): a rank is a straggler when it is many
MADs *and* a meaningful fraction slower than the fleet. A rank is judged only on steps past its
warm-up: a rank starved of CPU at start-up, on an overloaded node, prints slow first steps, and
that is a start-up, not a straggler.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime

from pydantic import Field

from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen
from goodput.robust import slow_outliers


class StragglerConfig(Frozen):
    z: float = Field(default=6.0, gt=0.0)
    min_slowdown: float = Field(default=0.10, ge=0.0)
    window: int = Field(default=50, ge=1)
    min_samples: int = Field(default=5, ge=1)
    min_ranks: int = Field(default=4, ge=3)
    # A rank's first steps are its start-up (compilation, NCCL set-up, a late or CPU-starved
    # start), not its pace: until its window is full they are set aside, so a rank is judged on
    # `min_samples` steps past them. A full window's median outvotes them on its own.
    warmup_steps: int = Field(default=5, ge=0, le=1000)
    # Reports the job prints itself (goodput.detect.straggler_report): a rank scoring below the
    # threshold this many times in a row is a straggler (NVRx's detector alarms below 0.75).
    report_threshold: float = Field(default=0.75, gt=0.0, le=1.0)
    report_consecutive: int = Field(default=3, ge=1, le=1000)


DEFAULT_STRAGGLER_CONFIG = StragglerConfig()


class StragglerFinding(Frozen):
    rank: int
    host: str | None = None
    median_step_s: float
    fleet_median_s: float
    slowdown: float  # 0.25 = 25 % slower than the fleet median
    robust_z: float
    explanation: str


def find_stragglers(step_times: Mapping[int, Sequence[float]], hosts: Mapping[int, str] | None = None,
                    config: StragglerConfig = DEFAULT_STRAGGLER_CONFIG) -> list[StragglerFinding]:
    """Ranks whose recent step times stand out, slowest first; [] when there is too little data."""
    medians = {rank: statistics.median(steady) for rank, times in step_times.items()
               if len(steady := _steady(list(times), config)) >= config.min_samples}
    findings = []
    for out in slow_outliers(medians, z=config.z, min_slowdown=config.min_slowdown, min_count=config.min_ranks):
        host = (hosts or {}).get(out.key)
        where = f" on {host}" if host else ""
        why = (f"rank {out.key}{where} takes {out.value:.3f} s per step against a fleet median of "
               f"{out.fleet:.3f} s ({out.slowdown:+.0%}, {out.robust_z:.1f} robust sigma)")
        findings.append(StragglerFinding(rank=out.key, host=host, median_step_s=out.value,
                                         fleet_median_s=out.fleet, slowdown=out.slowdown,
                                         robust_z=out.robust_z, explanation=why))
    return sorted(findings, key=lambda f: (-f.slowdown, f.rank))


def _steady(times: list[float], config: StragglerConfig) -> list[float]:
    """The step times a rank is judged on: its window, less its warm-up while the window is not full."""
    recent = times[-config.window:]
    return recent if len(times) >= config.window else recent[config.warmup_steps:]


def straggler_anomaly(findings: Sequence[StragglerFinding], *, anomaly_id: str, job_id: str,
                      observed_at: datetime, detected_at: datetime, cluster: str = "default",
                      job_attempt: int = 0) -> Anomaly | None:
    if not findings:
        return None
    return Anomaly(id=anomaly_id, source=AnomalySource.LOG, kind=AnomalyKind.STRAGGLER, cluster=cluster,
                   job_id=job_id, job_attempt=job_attempt,
                   nodes=tuple(dict.fromkeys(f.host for f in findings if f.host)),
                   ranks=tuple(f.rank for f in findings), evidence=[f.explanation for f in findings],
                   category=Category.STRAGGLER, observed_at=observed_at, detected_at=detected_at)
