"""The pure GPU rules: one GPU's own counters, the Xid table, and the peer comparisons of one job.

Split from `goodput.detect.gpu` (the sample, the probe seam and the finding) so that the model the
probes fill and the verdicts drawn from it change apart: a new rule or Xid lands here, a new field
there. Nothing here touches NVML or HTTP.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from goodput.detect.gpu import (
    SLOWDOWN_REASONS,
    GpuFinding,
    GpuRecoveryAction,
    GpuSample,
    Severity,
    XidEvent,
    normalize_pci_bus_id,
)
from goodput.models import AnomalyKind, Category

# Xid → (category, critical?, meaning). Only codes whose cause is well established are listed;
# the rest become UNKNOWN warnings so that they are visible without driving a drain.
XID_CATALOGUE: dict[int, tuple[Category, bool, str]] = {
    13: (Category.APP_ERROR, False, "graphics engine exception (usually the application)"),
    31: (Category.APP_ERROR, False, "GPU memory page fault (usually the application)"),
    43: (Category.APP_ERROR, False, "GPU stopped processing (application fault)"),
    45: (Category.UNKNOWN, False, "preemptive cleanup (a knock-on of another error)"),
    48: (Category.GPU_HARDWARE, True, "double-bit ECC error"),
    61: (Category.GPU_HARDWARE, True, "internal micro-controller breakpoint/warning"),
    62: (Category.GPU_HARDWARE, True, "internal micro-controller halt"),
    63: (Category.GPU_HARDWARE, False, "ECC page retirement or row remapping recorded"),
    64: (Category.GPU_HARDWARE, True, "ECC page retirement or row remapping failure"),
    74: (Category.NVLINK, True, "NVLink error"),
    79: (Category.GPU_HARDWARE, True, "GPU has fallen off the bus"),
    92: (Category.GPU_HARDWARE, False, "high single-bit ECC error rate"),
    94: (Category.GPU_HARDWARE, False, "contained ECC error (the affected application was killed)"),
    95: (Category.GPU_HARDWARE, True, "uncontained ECC error"),
    109: (Category.GPU_HARDWARE, True, "context switch timeout"),
    119: (Category.GPU_HARDWARE, True, "GSP RPC timeout"),
    120: (Category.GPU_HARDWARE, True, "GSP error"),
    121: (Category.NVLINK, True, "C2C link error"),
    136: (Category.NVLINK, True, "NVLink link training failure"),
    140: (Category.GPU_HARDWARE, True, "unrecovered ECC error"),
    143: (Category.GPU_HARDWARE, True, "GPU initialization failure"),
    154: (Category.GPU_HARDWARE, False, "GPU recovery action changed (the message names it)"),
}

_RESET_ACTIONS = frozenset({GpuRecoveryAction.GPU_RESET, GpuRecoveryAction.NODE_REBOOT,
                            GpuRecoveryAction.DRAIN_AND_RESET, GpuRecoveryAction.BUS_RESET,
                            GpuRecoveryAction.SYSTEM_REBOOT})
_FABRIC_ACTIONS = frozenset({GpuRecoveryAction.DRAIN_P2P, GpuRecoveryAction.RECOVER_IMEX_DOMAIN})


def _finding(sample: GpuSample, rule: str, kind: AnomalyKind, category: Category, severity: Severity,
             *evidence: str, xid: int | None = None) -> GpuFinding:
    return GpuFinding(rule=rule, kind=kind, category=category, severity=severity, node=sample.node,
                      gpu_index=sample.index, uuid=sample.uuid, pci_bus_id=sample.pci_bus_id, xid=xid,
                      evidence=tuple(f"{sample.label}: {line}" for line in evidence),
                      signature_ids=(f"xid-{xid}",) if xid is not None else ())


def xid_finding(event: XidEvent, sample: GpuSample | None = None) -> GpuFinding:
    """An Xid, classified by the catalogue; `sample` (when known) names the GPU more fully."""
    category, critical, meaning = XID_CATALOGUE.get(event.code, (Category.UNKNOWN, False, "unlisted Xid"))
    where = sample or GpuSample(index=event.gpu_index, uuid=event.uuid, pci_bus_id=event.pci_bus_id,
                                node=event.node)
    hardware = category in {Category.GPU_HARDWARE, Category.NVLINK}
    kind = AnomalyKind.GPU_FAULT if hardware else AnomalyKind.CRASH
    detail = f"Xid {event.code} ({meaning})" + (f": {event.message}" if event.message else "")
    return _finding(where, f"xid-{event.code}", kind, category,
                    Severity.CRITICAL if critical else Severity.WARNING, detail, xid=event.code)


def sample_findings(sample: GpuSample, previous: GpuSample | None = None) -> list[GpuFinding]:
    """Hardware verdicts about one GPU from its own counters.

    Aggregate (lifetime) uncorrectable counts only count when they grew since `previous`: a GPU
    that had one DBE two years ago and has been fine since is not today's culprit.
    """
    found: list[GpuFinding] = []
    fault, hw = AnomalyKind.GPU_FAULT, Category.GPU_HARDWARE
    if sample.gpu_lost:
        found.append(_finding(sample, "gpu-lost", fault, hw, Severity.CRITICAL,
                              "NVML reports the GPU is lost (fallen off the bus)"))
    if sample.gpu_reset_required:
        found.append(_finding(sample, "reset-required", fault, hw, Severity.CRITICAL,
                              "NVML reports the GPU requires a reset before it can be used again"))
    if sample.ecc_volatile_uncorrected:
        found.append(_finding(sample, "ecc-uncorrectable", fault, hw, Severity.CRITICAL,
                              f"{sample.ecc_volatile_uncorrected} uncorrectable ECC errors"
                              " since driver load"))
    elif (previous is not None and sample.ecc_aggregate_uncorrected is not None
          and previous.ecc_aggregate_uncorrected is not None
          and sample.ecc_aggregate_uncorrected > previous.ecc_aggregate_uncorrected):
        found.append(_finding(sample, "ecc-uncorrectable", fault, hw, Severity.CRITICAL,
                              f"aggregate uncorrectable ECC errors rose {previous.ecc_aggregate_uncorrected}"
                              f" → {sample.ecc_aggregate_uncorrected}"))
    if sample.row_remap_failure:
        found.append(_finding(sample, "row-remap-failure", fault, hw, Severity.CRITICAL,
                              "row remapping failed: the GPU has run out of spare rows"))
    if sample.row_remap_pending:
        found.append(_finding(sample, "row-remap-pending", fault, hw, Severity.WARNING,
                              "row remapping pending: takes effect at the next GPU reset"))
    if sample.retired_pages_pending:
        found.append(_finding(sample, "page-retirement-pending", fault, hw, Severity.WARNING,
                              "page retirement pending: takes effect at the next GPU reset"))
    action = sample.recovery_action
    if action in _RESET_ACTIONS:
        found.append(_finding(sample, "recovery-action", fault, hw, Severity.CRITICAL,
                              f"driver asks for recovery action {action}"))
    elif action in _FABRIC_ACTIONS:
        found.append(_finding(sample, "recovery-action", fault, Category.NVLINK, Severity.CRITICAL,
                              f"driver asks for recovery action {action}"))
    slow = sorted(SLOWDOWN_REASONS.intersection(sample.clock_event_reasons or ()))
    if slow:
        found.append(_finding(sample, "clock-slowdown", AnomalyKind.STRAGGLER, Category.STRAGGLER,
                              Severity.WARNING, f"clocks held down by {', '.join(slow)}"))
    found.extend(xid_finding(event, sample) for event in sample.xid_events)
    return found


def idle_gpu_findings(samples: Sequence[GpuSample], *, busy_pct: float = 60.0, idle_pct: float = 5.0,
                      min_gpus: int = 3) -> list[GpuFinding]:
    """Hang hint: a GPU idles while the median of its peers in the same job is busy.

    A rank stuck in a collective or a dead data loader shows up exactly so; a whole job going
    idle together (checkpointing, evaluation) does not, which is why only the odd one out counts.
    The caller passes the GPUs of one job.
    """
    measured = [s for s in samples if s.utilisation_pct is not None]
    if len(measured) < min_gpus:
        return []
    found: list[GpuFinding] = []
    for sample in measured:
        assert sample.utilisation_pct is not None
        peers = [p.utilisation_pct for p in measured if p is not sample and p.utilisation_pct is not None]
        peer_median = statistics.median(peers)
        if sample.utilisation_pct <= idle_pct and peer_median >= busy_pct:
            found.append(_finding(sample, "idle-among-busy", AnomalyKind.HANG, Category.HANG,
                                  Severity.WARNING,
                                  f"utilisation {sample.utilisation_pct:.0f}% while the median of its "
                                  f"{len(peers)} peers is {peer_median:.0f}%"))
    return found


def robust_low_outliers(values: Sequence[float], *, z: float = 3.5,
                        min_drop: float = 0.15) -> list[int]:
    """Indices far below the median by the modified z-score (median/MAD, Iglewicz-Hoaglin).

    `min_drop` (relative to the median) keeps tiny absolute spreads from flagging anyone when
    every GPU runs at nearly the same clock and the MAD is almost zero.
    """
    if len(values) < 3:
        return []
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    flagged = []
    for i, value in enumerate(values):
        drop = (median - value) / median if median > 0 else 0.0
        score = float("-inf") if mad == 0 else 0.6745 * (value - median) / mad
        if value < median and score <= -z and drop >= min_drop:
            flagged.append(i)
    return flagged


def straggler_findings(samples: Sequence[GpuSample], *, z: float = 3.5,
                       min_drop: float = 0.15) -> list[GpuFinding]:
    """Straggler hint: a GPU whose SM clock or power draw sits far below its job's peers.

    In synchronous data-parallel training every rank waits for the slowest, so one throttled GPU
    shows up as a lower clock (or power, when clocks are not reported) than everyone else.
    """
    found: dict[int, GpuFinding] = {}
    for metric, unit in (("sm_clock_mhz", "MHz"), ("power_w", "W")):
        measured = [(s, float(v)) for s in samples if (v := getattr(s, metric)) is not None]
        values = [v for _, v in measured]
        for i in robust_low_outliers(values, z=z, min_drop=min_drop):
            sample, value = measured[i]
            if id(sample) in found:
                continue
            found[id(sample)] = _finding(
                sample, "low-outlier", AnomalyKind.STRAGGLER, Category.STRAGGLER, Severity.WARNING,
                f"{metric} {value:.0f} {unit} vs job median {statistics.median(values):.0f} {unit}")
    return list(found.values())


def _identity(sample: GpuSample) -> tuple[str | None, str]:
    return sample.node, sample.uuid or sample.pci_bus_id or str(sample.index)


def evaluate(samples: Sequence[GpuSample], previous: Iterable[GpuSample] = (),
             xid_events: Iterable[XidEvent] = ()) -> list[GpuFinding]:
    """All rules over the GPUs of one job: per-GPU hardware verdicts, then the peer comparisons.

    `xid_events` not already carried by a sample are matched to a sample by UUID, PCI id or
    index on the same node, so that a kernel-log Xid is named like the NVML sample it belongs to.
    """
    before = {_identity(s): s for s in previous}
    found: list[GpuFinding] = []
    for sample in samples:
        found.extend(sample_findings(sample, before.get(_identity(sample))))
    for event in xid_events:
        found.append(xid_finding(event, _match(event, samples)))
    found.extend(idle_gpu_findings(samples))
    found.extend(straggler_findings(samples))
    return found


def _match(event: XidEvent, samples: Sequence[GpuSample]) -> GpuSample | None:
    pci = normalize_pci_bus_id(event.pci_bus_id) if event.pci_bus_id else None
    for s in samples:
        if event.node and s.node and event.node != s.node:
            continue
        if (event.uuid and s.uuid == event.uuid) or (
                pci and s.pci_bus_id and normalize_pci_bus_id(s.pci_bus_id) == pci) or (
                not event.uuid and not pci and event.gpu_index is not None and s.index == event.gpu_index):
            return s
    return None
