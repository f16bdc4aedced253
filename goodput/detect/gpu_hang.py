"""What the GPUs of a job that stopped stepping say: a hung collective, one rank out of it, or nothing.

NVML's utilisation is the "percent of time over the past sample period during which one or more
kernels was executing on the GPU" (NVML API reference, `nvmlUtilization_t.gpu`); its memory
utilisation the percent of that time "during which global (device) memory was being read or
written". A collective waits for its peers inside a running kernel: NCCL's kernels poll flags
that the peers' data will set (the LL/Simple protocols' wait loops, see NCCL's troubleshooting
guide and its RAS section on hangs), so a GPU waiting in a collective that never completes shows
utilisation pinned near 100 % while moving next to no memory. Hence two signatures, judged over
the recent reports of *all* the job's nodes:

- **hung collective**: every GPU pinned, none moving memory: the whole job waits inside a collective;
- **rank out of the collective**: one GPU (or a few, fewer than half) idle while the rest are
  pinned: its peers wait for it, so it is dead, stuck on the host, or elsewhere in the program.
  It is named as the culprit only when it was seen busy earlier in the window (a GPU never busy
  may simply not be this job's on a shared node).

A balanced busy job moves memory (so it is not "quiet"), and a job in a slow phase (start-up,
checkpoint save, evaluation, data loading) is neither pinned nor quiet on every GPU, so neither is
called hung. Known confounder: rank 0 saving a checkpoint alone while its peers wait in an NCCL
barrier looks like a rank out of the collective; that is why this is evidence on a hang the job's
own rhythm already declared (`goodput.detect.hang`, with its slow-phase windows), never a verdict,
and a hang never drains.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Literal

from pydantic import Field

from goodput.detect.gpu import GpuSample
from goodput.models import Frozen

Report = tuple[datetime, Sequence[GpuSample]]


class GpuHangConfig(Frozen):
    recent_s: float = Field(default=30.0, gt=0.0)
    """How far back from the hang the GPUs are judged: three reports at the agents' 10 s feed."""
    min_reports: int = Field(default=2, ge=1)
    """Reports of a GPU within `recent_s` needed to judge it: one sample can catch a passing moment."""
    busy_pct: float = Field(default=90.0, ge=0.0, le=100.0)
    """Pinned: a spinning collective holds utilisation near 100 %; a data-bound phase does not."""
    quiet_memory_pct: float = Field(default=10.0, ge=0.0, le=100.0)
    """Moving no memory: a training step's kernels keep device memory busy far above this."""
    idle_pct: float = Field(default=5.0, ge=0.0, le=100.0)
    min_gpus: int = Field(default=2, ge=2)
    """A collective needs two ranks."""


DEFAULT_GPU_HANG_CONFIG = GpuHangConfig()


class IdleGpu(Frozen):
    node: str
    gpu: str        # GpuSample.label
    gpu_ref: str    # the UUID, else the PCI bus id, else node:gpuN
    busy_before: bool
    """Seen busy earlier in the window: it was in the job and dropped out."""


class GpuHangEvidence(Frozen):
    verdict: Literal["hung-collective", "rank-idle", "none"]
    idle: tuple[IdleGpu, ...] = ()
    evidence: tuple[str, ...] = ()

    @property
    def culprits(self) -> tuple[IdleGpu, ...]:
        return tuple(g for g in self.idle if g.busy_before)


def _key(sample: GpuSample) -> tuple[str, str]:
    return sample.node or "?", sample.uuid or sample.pci_bus_id or str(sample.index)


def _ref(sample: GpuSample) -> str:
    return sample.uuid or sample.pci_bus_id or f"{sample.node or '?'}:gpu{sample.index}"


def judge_hang(reports: Mapping[str, Sequence[Report]], now: datetime,
               config: GpuHangConfig = DEFAULT_GPU_HANG_CONFIG) -> GpuHangEvidence:
    """The GPUs' evidence on a job that stopped stepping; `reports` are each node's, oldest first."""
    since = now - timedelta(seconds=config.recent_s)
    recent: dict[tuple[str, str], list[GpuSample]] = {}
    earlier_busy: set[tuple[str, str]] = set()
    for node_reports in reports.values():
        for at, samples in node_reports:
            for sample in samples:
                if sample.gpu_lost or sample.utilisation_pct is None:
                    continue
                if at > since:
                    recent.setdefault(_key(sample), []).append(sample)
                elif sample.utilisation_pct >= config.busy_pct:
                    earlier_busy.add(_key(sample))
    judged = {k: v for k, v in recent.items() if len(v) >= config.min_reports}
    if len(judged) < config.min_gpus:
        return GpuHangEvidence(verdict="none")
    util = {k: [s.utilisation_pct or 0.0 for s in v] for k, v in judged.items()}
    pinned = {k for k, u in util.items() if min(u) >= config.busy_pct}
    idle = {k for k, u in util.items() if max(u) <= config.idle_pct}
    quiet = {k for k, v in judged.items()
             if all(s.memory_utilisation_pct is not None and s.memory_utilisation_pct <= config.quiet_memory_pct
                    for s in v)}
    total = len(judged)
    if pinned == set(judged) and quiet == set(judged):
        return GpuHangEvidence(verdict="hung-collective", evidence=(
            f"all {total} GPUs of the job's nodes pinned at >= {config.busy_pct:.0f} % utilisation with device memory "
            f"idle (<= {config.quiet_memory_pct:.0f} %) over the last {config.recent_s:.0f} s: kernels spinning in a "
            f"collective that does not complete (a hung collective)",))
    if idle and 2 * len(idle) < total and pinned | idle == set(judged) and len(pinned) >= 1:
        peers = statistics.median(statistics.median(util[k]) for k in pinned)
        found = []
        for k in sorted(idle):
            last = judged[k][-1]
            found.append(IdleGpu(node=k[0], gpu=last.label, gpu_ref=_ref(last), busy_before=k in earlier_busy))
        lines = [f"{g.gpu}: idle (<= {config.idle_pct:.0f} % over the last {config.recent_s:.0f} s) while the job's "
                 f"other {len(pinned)} GPUs are pinned (median {peers:.0f} %)"
                 + ("; busy earlier in the window, so its rank dropped out of the collective its peers wait in"
                    if g.busy_before else "; not seen busy in the window (perhaps not this job's GPU)")
                 for g in found]
        if pinned <= quiet:
            lines.append(f"the {len(pinned)} pinned GPUs move no device memory: they spin in a collective")
        return GpuHangEvidence(verdict="rank-idle", idle=tuple(found), evidence=tuple(lines))
    return GpuHangEvidence(verdict="none")
