"""Straggler detection: one rank (and so its GPU or node) slows every collective down.

Mean and standard deviation are dragged by the very outlier being looked for, so the statistics
are robust: each rank's median step time over a window, then the median and the median absolute
deviation (MAD) across ranks. A rank is a straggler when it is many MADs *and* a meaningful
fraction slower than the fleet; the second condition keeps a perfectly uniform fleet (MAD near
zero) from flagging noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime

from pydantic import Field

from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen

_MAD_TO_SIGMA = 1.4826


class StragglerConfig(Frozen):
    z: float = Field(default=6.0, gt=0.0)
    min_slowdown: float = Field(default=0.10, ge=0.0)
    window: int = Field(default=50, ge=1)
    min_samples: int = Field(default=5, ge=1)
    min_ranks: int = Field(default=4, ge=3)
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
    medians = {rank: statistics.median(list(times)[-config.window:])
               for rank, times in step_times.items() if len(times) >= config.min_samples}
    if len(medians) < config.min_ranks:
        return []
    fleet = statistics.median(medians.values())
    if fleet <= 0:
        return []
    mad = statistics.median(abs(m - fleet) for m in medians.values())
    # A floor of 1 % of the median keeps z finite when all but the outlier are identical.
    sigma = max(_MAD_TO_SIGMA * mad, 0.01 * fleet)
    findings = []
    for rank, median in medians.items():
        z = (median - fleet) / sigma
        slowdown = median / fleet - 1.0
        if z > config.z and slowdown > config.min_slowdown:
            host = (hosts or {}).get(rank)
            where = f" on {host}" if host else ""
            why = (f"rank {rank}{where} takes {median:.3f} s per step against a fleet median of "
                   f"{fleet:.3f} s ({slowdown:+.0%}, {z:.1f} robust sigma)")
            findings.append(StragglerFinding(rank=rank, host=host, median_step_s=median, fleet_median_s=fleet,
                                             slowdown=slowdown, robust_z=z, explanation=why))
    return sorted(findings, key=lambda f: (-f.slowdown, f.rank))


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
