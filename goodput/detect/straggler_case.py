"""The case for excluding a straggler's node: which node and GPU, why, and what the job loses meanwhile.

One slow rank slows every rank of a synchronous job, so the job's own step time only says that
it is slow, not where. Two kinds of evidence say where: the ranks' own step times
(`goodput.detect.straggler`: a rank many robust sigmas and a meaningful fraction slower than the
others) and the node agents' GPU samples compared across *all* the job's nodes, not one node's
eight (a node whose every GPU runs hot is one node the job waits for). Both use the robust
statistic of `goodput.robust`. A GPU's evidence is its SM clock or power draw far below the job's
median, its temperature far above, a hardware slowdown reason (thermal, power brake) that most of
the job's GPUs do not share, and PCIe replay or NVLink error counters growing since the last
sample while the job's median GPU's did not.

Step times decide and GPUs explain: a job whose ranks keep pace raises nothing whatever a GPU
shows (it costs this job nothing), and a straggler whose GPUs look healthy is still named (the
cause is the host: CPU, data loader, network). Only a job that prints no per-rank times is judged
from GPUs alone, and then only on two signals of one GPU. The case for acting is the step time
lost per hour: the job runs at its slowest rank's pace, so an hour of work at the median rank's
pace takes (slow - median)/median x 3600 s longer. The recommendation is to exclude the node at
the job's next restart (the node is evidence, not proof: attribution still checks that Slurm
placed the job there before anything acts on it).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Literal

from pydantic import Field

from goodput.detect.gpu import SLOWDOWN_REASONS, GpuSample
from goodput.detect.straggler import DEFAULT_STRAGGLER_CONFIG, StragglerConfig, StragglerFinding, find_stragglers
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen
from goodput.robust import slow_outliers

SECONDS_PER_HOUR = 3600.0


class GpuStragglerConfig(Frozen):
    z: float = Field(default=3.5, gt=0.0)
    """Robust sigmas from the job's median GPU (Iglewicz-Hoaglin's 3.5, as the agent's own rule)."""
    min_clock_drop: float = Field(default=0.10, ge=0.0)
    """A clock 10 % below the job's median is a GPU running 10 % slower (boost bins differ by less)."""
    min_power_drop: float = Field(default=0.20, ge=0.0)
    min_temperature_rise: float = Field(default=0.15, ge=0.0)
    min_gpus: int = Field(default=3, ge=3)
    min_counter_growth: int = Field(default=1, ge=1)
    """PCIe replays or NVLink errors since the previous sample, where the job's median GPU had none."""


DEFAULT_GPU_STRAGGLER_CONFIG = GpuStragglerConfig()


class GpuEvidence(Frozen):
    node: str
    gpu: str            # GpuSample.label: node17/gpu3 (GPU-…)
    gpu_ref: str        # the UUID, else the PCI bus id, else node:gpuN
    gpu_index: int | None = None
    signals: tuple[str, ...]
    clock_ratio: float | None = None  # the job's median SM clock / this GPU's (1.25: 25 % slower)


class StragglerCase(Frozen):
    node: str | None
    gpu: str | None = None
    gpu_ref: str | None = None
    ranks: tuple[int, ...] = ()
    slowdown: float
    lost_s_per_h: float
    basis: Literal["step-times", "gpu"]
    evidence: tuple[str, ...]
    recommendation: str


def lost_seconds_per_hour(slow_s: float, median_s: float) -> float:
    """How much longer an hour of work at the median rank's pace takes at the slow rank's."""
    if median_s <= 0 or slow_s <= median_s:
        return 0.0
    return (slow_s - median_s) / median_s * SECONDS_PER_HOUR


def _key(sample: GpuSample) -> tuple[str, str]:
    return sample.node or "?", sample.uuid or sample.pci_bus_id or str(sample.index)


def _growth(samples: Sequence[GpuSample], previous: Mapping[tuple[str, str], GpuSample], field: str
            ) -> dict[tuple[str, str], int]:
    grown: dict[tuple[str, str], int] = {}
    for sample in samples:
        before = previous.get(_key(sample))
        now, then = getattr(sample, field), getattr(before, field, None) if before else None
        if now is not None and then is not None:
            grown[_key(sample)] = max(0, int(now) - int(then))
    return grown


def gpu_evidence(samples: Sequence[GpuSample], previous: Sequence[GpuSample] = (),
                 config: GpuStragglerConfig = DEFAULT_GPU_STRAGGLER_CONFIG) -> list[GpuEvidence]:
    """The GPUs of one job (all its nodes) that stand out from the rest, most signals first."""
    live = [s for s in samples if not s.gpu_lost and s.node]
    by_key = {_key(s): s for s in live}
    signals: dict[tuple[str, str], list[str]] = {}
    ratios: dict[tuple[str, str], float] = {}

    def inverse(field: str) -> dict[tuple[str, str], float]:  # lower is slower: compare periods
        return {k: 1.0 / float(v) for k, s in by_key.items() if (v := getattr(s, field)) is not None and v > 0}

    for field, what, unit, drop in (("sm_clock_mhz", "sm clock", "MHz", config.min_clock_drop),
                                    ("power_w", "power", "W", config.min_power_drop)):
        for out in slow_outliers(inverse(field), z=config.z, min_slowdown=drop, min_count=config.min_gpus):
            value, fleet = 1.0 / out.value, 1.0 / out.fleet
            signals.setdefault(out.key, []).append(
                f"{what} {value:.0f} {unit}, {1 - value / fleet:.0%} below the job's median {fleet:.0f} {unit} "
                f"({out.robust_z:.1f} robust sigma)")
            if field == "sm_clock_mhz":
                ratios[out.key] = out.value / out.fleet
    temps = {k: float(s.temperature_c) for k, s in by_key.items() if s.temperature_c is not None}
    for out in slow_outliers(temps, z=config.z, min_slowdown=config.min_temperature_rise, min_count=config.min_gpus):
        signals.setdefault(out.key, []).append(f"temperature {out.value:.0f} °C against the job's median "
                                               f"{out.fleet:.0f} °C")
    throttled = {k: sorted(SLOWDOWN_REASONS.intersection(s.clock_event_reasons or ())) for k, s in by_key.items()
                 if s.clock_event_reasons is not None}
    held = [k for k, reasons in throttled.items() if reasons]
    if len(throttled) >= config.min_gpus and 2 * len(held) < len(throttled):  # a hot room is no one GPU's fault
        for k in held:
            signals.setdefault(k, []).append(f"clocks held down by {', '.join(throttled[k])}, unlike most of the "
                                             f"job's {len(throttled)} GPUs")
    before = {_key(s): s for s in previous}
    for field, what in (("pcie_replay_count", "PCIe replays"), ("nvlink_error_count", "NVLink errors")):
        grown = _growth(live, before, field)
        if len(grown) < config.min_gpus or statistics.median(grown.values()) > 0:
            continue
        for k, delta in grown.items():
            if delta >= config.min_counter_growth:
                signals.setdefault(k, []).append(f"{what} +{delta} since the last sample (the job's median GPU: +0)")
    found = [GpuEvidence(node=by_key[k].node or "?", gpu=by_key[k].label,
                         gpu_ref=by_key[k].uuid or by_key[k].pci_bus_id or f"{k[0]}:gpu{by_key[k].index}",
                         gpu_index=by_key[k].index, signals=tuple(lines), clock_ratio=ratios.get(k))
             for k, lines in signals.items()]
    return sorted(found, key=lambda e: (-len(e.signals), e.node, e.gpu))


def _recommend(node: str | None, gpu: str | None) -> str:
    if node is None:
        return "the rank's node is not known: report only (a restart could land on the same slow node)"
    return f"exclude {node} at the job's next restart" + (f"; the GPU to look at: {gpu}" if gpu else "")


def _from_steps(finding: StragglerFinding, gpus: Sequence[GpuEvidence]) -> StragglerCase:
    node, placed_by_gpus = finding.host, False
    if node is None and len({e.node for e in gpus}) == 1:
        node, placed_by_gpus = gpus[0].node, True
    mine = [e for e in gpus if e.node == node]
    lost = lost_seconds_per_hour(finding.median_step_s, finding.fleet_median_s)
    lines = [f"{finding.explanation}: the job runs at its pace and loses {lost:.0f} s of step time per hour"]
    if placed_by_gpus:
        lines.append(f"rank {finding.rank} printed no host; {node} from GPU evidence, the only node that stands out")
    if mine:
        lines += [f"{mine[0].gpu}: {signal}" for signal in mine[0].signals]
    elif node is not None:
        lines.append(f"no GPU of {node} stands out (clocks, throttling, power, temperature, PCIe/NVLink errors): "
                     f"the cause may be the host (CPU, data loader, network)")
    gpu = mine[0].gpu if mine else None
    return StragglerCase(node=node, gpu=gpu, gpu_ref=mine[0].gpu_ref if mine else None, ranks=(finding.rank,),
                         slowdown=finding.slowdown, lost_s_per_h=lost, basis="step-times", evidence=tuple(lines),
                         recommendation=_recommend(node, gpu))


def _from_gpu(evidence: GpuEvidence) -> StragglerCase:
    ratio = evidence.clock_ratio or 1.0
    lost = lost_seconds_per_hour(ratio, 1.0)
    lines = [f"{evidence.gpu}: {signal}" for signal in evidence.signals]
    lines.append(f"the job prints no per-rank step times: {lost:.0f} s per hour is an estimate from the clock, "
                 f"for a job whose step is bound by this GPU")
    return StragglerCase(node=evidence.node, gpu=evidence.gpu, gpu_ref=evidence.gpu_ref, slowdown=ratio - 1.0,
                         lost_s_per_h=lost, basis="gpu", evidence=tuple(lines),
                         recommendation=_recommend(evidence.node, evidence.gpu))


def straggler_cases(step_times: Mapping[int, Sequence[float]], hosts: Mapping[int, str],
                    samples: Sequence[GpuSample] = (), previous: Sequence[GpuSample] = (),
                    config: StragglerConfig = DEFAULT_STRAGGLER_CONFIG,
                    gpu_config: GpuStragglerConfig = DEFAULT_GPU_STRAGGLER_CONFIG) -> list[StragglerCase]:
    """One case per straggler of one job, most time lost first; [] for a job that keeps pace."""
    gpus = gpu_evidence(samples, previous, gpu_config)
    timed = sum(1 for times in step_times.values() if len(times) >= config.min_samples)
    if timed >= config.min_ranks:
        cases = [_from_steps(f, gpus) for f in find_stragglers(step_times, hosts, config)]
    else:
        cases = [_from_gpu(e) for e in gpus if len(e.signals) >= 2 and e.clock_ratio is not None]
    return sorted(cases, key=lambda c: (-c.lost_s_per_h, c.node or ""))


def straggler_anomaly_from_cases(cases: Sequence[StragglerCase], *, anomaly_id: str, job_id: str,
                                 observed_at: datetime, detected_at: datetime, cluster: str = "default",
                                 job_attempt: int = 0) -> Anomaly | None:
    """One straggler anomaly naming every case's node, GPU and ranks; the worst case's lines first."""
    if not cases:
        return None
    evidence = [f"{c.evidence[0]}; {c.recommendation}" for c in cases]
    evidence += [line for c in cases for line in c.evidence[1:]]
    return Anomaly(id=anomaly_id, source=AnomalySource.GPU if cases[0].basis == "gpu" else AnomalySource.LOG,
                   kind=AnomalyKind.STRAGGLER, cluster=cluster, job_id=job_id, job_attempt=job_attempt,
                   nodes=tuple(dict.fromkeys(c.node for c in cases if c.node)),
                   ranks=tuple(r for c in cases for r in c.ranks),
                   gpus=tuple(dict.fromkeys(c.gpu_ref for c in cases if c.gpu_ref)),
                   evidence=evidence, category=Category.STRAGGLER, observed_at=observed_at,
                   detected_at=detected_at, lost_s_per_h=min(round(cases[0].lost_s_per_h, 1), 1_000_000.0))
