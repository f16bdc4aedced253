"""GPU evidence added to a straggler or hang anomaly from the agents' samples of the job's nodes.

A straggler anomaly comes from the job's step times or its NVRx-style reports, a hang anomaly
from its stopped rhythm; neither sees a GPU. The service does (`goodput.detect.gpu_feed`), so on
the way to the incident each is explained by the GPUs of the nodes Slurm placed the job on, never
nodes read from the log: a straggler's node gets the GPU and the reason it is slow
(`straggler_case.gpu_evidence`: clock, power, temperature, throttle reasons, PCIe/NVLink error
growth), a straggler that named no node is placed on the one node whose GPUs stand out (as
`straggler_case` does for a rank that printed no host), and a hang gets `gpu_hang`'s judgement,
the GPU of a rank that dropped out of the collective named as the culprit. The anomaly keeps its
id (the incident dedupes a retried submit) and its kind: GPUs explain, they never open anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from goodput.detect.gpu import GpuSample
from goodput.detect.gpu_hang import DEFAULT_GPU_HANG_CONFIG, GpuHangConfig, Report, judge_hang
from goodput.detect.straggler_case import (
    DEFAULT_GPU_STRAGGLER_CONFIG,
    GpuEvidence,
    GpuStragglerConfig,
    gpu_evidence,
)
from goodput.models import Anomaly, AnomalyKind

EXPLAINED = (AnomalyKind.STRAGGLER, AnomalyKind.HANG)


def _with(anomaly: Anomaly, lines: Sequence[str], nodes: Sequence[str] = (), gpus: Sequence[str] = ()) -> Anomaly:
    return anomaly.model_copy(update={
        "evidence": [*anomaly.evidence, *lines],
        "nodes": tuple(dict.fromkeys((*anomaly.nodes, *nodes))),
        "gpus": tuple(dict.fromkeys((*anomaly.gpus, *gpus)))})


def _lines(evidence: Sequence[GpuEvidence], samples: Sequence[GpuSample]) -> list[str]:
    """Each standing-out GPU's signals, and how far its clock sits below its own maximum."""
    by_ref = {s.uuid or s.pci_bus_id or f"{s.node or '?'}:gpu{s.index}": s for s in samples}
    lines: list[str] = []
    for e in evidence:
        lines += [f"{e.gpu}: {signal}" for signal in e.signals]
        sample = by_ref.get(e.gpu_ref)
        now, top = (sample.sm_clock_mhz, sample.max_sm_clock_mhz) if sample else (None, None)
        if now is not None and top and now < top and e.clock_ratio is not None:
            lines.append(f"{e.gpu}: SM clock {now:.0f} MHz of its maximum {top:.0f} MHz ({1 - now / top:.0%} below)")
    return lines


def explain_straggler(anomaly: Anomaly, job_nodes: Sequence[str], latest: Sequence[GpuSample],
                      oldest: Sequence[GpuSample] = (),
                      config: GpuStragglerConfig = DEFAULT_GPU_STRAGGLER_CONFIG) -> Anomaly:
    """The straggler's GPU and why, from the GPUs of all `job_nodes` (Slurm's); unchanged without samples."""
    placed = set(job_nodes)
    samples = [s for s in latest if s.node in placed]
    if not samples:
        return anomaly
    reported = {s.node for s in samples}
    standing = gpu_evidence(samples, [s for s in oldest if s.node in placed], config)
    named = [n for n in anomaly.nodes if n in placed]
    lines: list[str] = []
    if not anomaly.nodes:
        nodes = list(dict.fromkeys(e.node for e in standing))
        if len(nodes) != 1:
            return anomaly
        mine = [e for e in standing if e.node == nodes[0]]
        lines.append(f"the report names no node; {nodes[0]} from GPU evidence across the job's {len(reported)} "
                     f"nodes, the only one that stands out")
        lines += _lines(mine, samples)
        return _with(anomaly, lines, nodes, [e.gpu_ref for e in mine])
    refs: list[str] = []
    for node in named:
        mine = [e for e in standing if e.node == node]
        if mine:
            lines += _lines(mine, samples)
            refs += [e.gpu_ref for e in mine]
        elif node in reported:
            lines.append(f"no GPU of {node} stands out against the job's {len(samples)} GPUs (clocks, throttling, "
                         f"power, temperature, PCIe/NVLink errors): the cause may be the host (CPU, data loader, "
                         f"network)")
    return _with(anomaly, lines, gpus=refs) if lines else anomaly


def explain_hang(anomaly: Anomaly, job_nodes: Sequence[str], reports: Mapping[str, Sequence[Report]],
                 now: datetime, config: GpuHangConfig = DEFAULT_GPU_HANG_CONFIG) -> Anomaly:
    """The hang's GPU evidence; a rank that dropped out of the collective names its node and GPU."""
    placed = {n: r for n, r in reports.items() if n in set(job_nodes)}
    judged = judge_hang(placed, now, config)
    if judged.verdict == "none":
        return anomaly
    culprits = judged.culprits
    lines = list(judged.evidence)
    silent = [n for n in dict.fromkeys(job_nodes) if n not in placed]
    if silent:  # judged without them; a node gone with its agent is one a hung job waits for
        lines.append(f"no recent GPU reports from {', '.join(silent[:20])} (its agent silent or not running)")
    return _with(anomaly, lines, [g.node for g in culprits], [g.gpu_ref for g in culprits])


def explain(anomaly: Anomaly, job_nodes: Sequence[str], reports: Mapping[str, Sequence[Report]],
            now: datetime) -> Anomaly:
    """Either explanation by the anomaly's kind; any other anomaly unchanged."""
    if anomaly.kind is AnomalyKind.HANG:
        return explain_hang(anomaly, job_nodes, reports, now)
    if anomaly.kind is AnomalyKind.STRAGGLER:
        latest = [s for r in reports.values() if r for s in r[-1][1]]
        oldest = [s for r in reports.values() if len(r) > 1 for s in r[0][1]]
        return explain_straggler(anomaly, job_nodes, latest, oldest)
    return anomaly
