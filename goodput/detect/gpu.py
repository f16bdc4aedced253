"""What goodput knows about a GPU at one instant, the seam that measures it, and what a rule finds.

NVML on the node and a DCGM-exporter scrape both produce `GpuSample`s; the rules
(`goodput.detect.gpu_rules`) turn samples (and Xid events) into the `GpuFinding`s defined here,
which become `Anomaly`s. Every measured field is
optional because real GPUs refuse individual queries (NotSupported, NoPermission, GPU lost) and
one refused field must never hide the others. Nothing here touches NVML or HTTP.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import Field

from goodput.diagnose.source_grades import Grade, gpu_health_grade, xid_grade
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen

_PCI = re.compile(r"^(?:PCI:)?(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.([0-7]))?$")


def normalize_pci_bus_id(value: str) -> str:
    """One spelling for NVML's `00000000:3B:00.0`, DCGM's and the kernel's `PCI:0000:3b:00`.

    The kernel omits the function and NVML pads the domain to eight digits; matching an Xid from
    dmesg to an NVML sample needs both to meet on `0000:3b:00.0`. Unparseable values pass through
    stripped so that nothing is silently dropped.
    """
    text = value.strip()
    match = _PCI.match(text)
    if not match:
        return text
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function or '0')}"


class GpuRecoveryAction(StrEnum):
    """NVML's NVML_GPU_RECOVERY_ACTION_* (driver R550+), by the same numbers."""

    NONE = "none"
    GPU_RESET = "gpu-reset"
    NODE_REBOOT = "node-reboot"
    DRAIN_P2P = "drain-p2p"
    DRAIN_AND_RESET = "drain-and-reset"
    RECOVER_IMEX_DOMAIN = "recover-imex-domain"
    BUS_RESET = "bus-reset"
    SYSTEM_REBOOT = "system-reboot"

    @classmethod
    def from_code(cls, code: int) -> GpuRecoveryAction | None:
        """The action for NVML's number `code`; None for a number it does not define."""
        order = list(cls)
        return order[code] if 0 <= code < len(order) else None


# nvmlClocksEventReason* / DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "gpu-idle", 0x002: "applications-clocks-setting", 0x004: "sw-power-cap",
    0x008: "hw-slowdown", 0x010: "sync-boost", 0x020: "sw-thermal-slowdown",
    0x040: "hw-thermal-slowdown", 0x080: "hw-power-brake-slowdown", 0x100: "display-clock-setting",
    0x200: "board-limit", 0x400: "reliability",
}
# Reasons that mean the hardware (not the workload or an administrator) is holding clocks down.
SLOWDOWN_REASONS = frozenset({"hw-slowdown", "hw-thermal-slowdown", "hw-power-brake-slowdown",
                              "sw-thermal-slowdown"})


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """The names of the reasons set in `mask`, with any bits NVML does not define as `unknown-0x..`."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(f"unknown-0x{unknown:x}")
    return tuple(names)


class XidEvent(Frozen):
    """One Xid: from NVML's event set, a DCGM scrape or an `NVRM: Xid` kernel line."""

    code: int = Field(ge=0)
    pci_bus_id: str | None = None
    gpu_index: int | None = None
    uuid: str | None = None
    node: str | None = None
    pid: int | None = None
    process: str | None = None
    message: str = ""
    source: str = "nvml"
    observed_at: datetime | None = None


class GpuSample(Frozen):
    """One GPU at one instant; None means "could not be measured", never "zero"."""

    index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None
    node: str | None = None
    job_ids: tuple[str, ...] = ()
    observed_at: datetime | None = None
    utilisation_pct: float | None = None
    memory_utilisation_pct: float | None = None
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    """The SM clock the GPU could run at (nvmlDeviceGetMaxClockInfo): how far below it a slow GPU sits."""
    power_w: float | None = None
    temperature_c: float | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    pcie_replay_count: int | None = None
    """PCIe replays since driver load (nvmlDeviceGetPcieReplayCounter); a climbing count is a bad link."""
    nvlink_error_count: int | None = None
    """NVLink replay, recovery and CRC errors summed over the GPU's links (nvmlDeviceGetNvLinkErrorCounter)."""
    clock_event_mask: int | None = None
    clock_event_reasons: tuple[str, ...] | None = None
    recovery_action: GpuRecoveryAction | None = None
    gpu_lost: bool = False
    """NVML answered "GPU is lost" (fallen off the bus): every other field is then unknown."""
    gpu_reset_required: bool = False
    """NVML answered "GPU requires restart" (NVML_ERROR_RESET_REQUIRED): nothing runs on the GPU
    until it is reset."""
    last_xid: int | None = None
    xid_events: tuple[XidEvent, ...] = ()
    errors: tuple[str, ...] = ()
    """`field: reason` for every query the GPU refused, so "unsupported" is visible, not silent."""

    @property
    def label(self) -> str:
        """How evidence names this GPU: `node17/gpu3 (GPU-…)`."""
        where = f"{self.node}/" if self.node else ""
        ident = f"gpu{self.index}" if self.index is not None else (self.pci_bus_id or "gpu?")
        return f"{where}{ident}" + (f" ({self.uuid})" if self.uuid else "")


@runtime_checkable
class GpuProbe(Protocol):
    """NVML on the node or a DCGM scrape; async so both share one shape."""

    async def sample(self) -> Sequence[GpuSample]:
        """One sample per GPU of the node, as NVML or DCGM reads it now."""
        ...

    async def poll_xid_events(self, timeout_ms: int) -> Sequence[XidEvent]:
        """Xids seen since the last call, waiting at most `timeout_ms` for the first one."""
        ...


class Severity(StrEnum):
    """How much a GPU finding counts: critical is a failure, a warning only a hint."""

    CRITICAL = "critical"
    WARNING = "warning"


class GpuFinding(Frozen):
    """A rule's verdict about one GPU, ready to become an `Anomaly` once a job is known."""

    rule: str
    kind: AnomalyKind
    category: Category
    severity: Severity
    node: str | None = None
    gpu_index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    xid: int | None = None
    evidence: tuple[str, ...] = ()
    signature_ids: tuple[str, ...] = ()
    """Catalogue ids (goodput.diagnose.signatures) whose restart/drain verdict should apply, e.g. `xid-79`."""

    @property
    def actionable(self) -> bool:
        """Critical findings are failures; warnings are hints that should not drain on their own."""
        return self.severity is Severity.CRITICAL

    @property
    def gpu_ref(self) -> str:
        """The GPU as a person can find it: its UUID, else its PCI bus id, else node and index."""
        return self.uuid or self.pci_bus_id or f"{self.node or '?'}:gpu{self.gpu_index}"

    def to_anomaly(self, *, job_id: str, observed_at: datetime, detected_at: datetime,
                   cluster: str = "default", job_attempt: int = 0,
                   ranks: tuple[int, ...] = ()) -> Anomaly:
        """The id is a digest of what was found, so re-finding it coalesces instead of piling up."""
        key = "\0".join([cluster, job_id, str(job_attempt), self.rule, self.node or "",
                         self.gpu_ref, str(self.xid)])
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        grade = self.grade
        return Anomaly(
            id=f"gpu:{self.rule}:{digest}", source=AnomalySource.GPU, kind=self.kind, cluster=cluster,
            job_id=job_id, job_attempt=job_attempt, nodes=(self.node,) if self.node else (),
            ranks=ranks, gpus=(self.gpu_ref,), evidence=list(self.evidence), category=self.category,
            signature_ids=self.signature_ids, observed_at=observed_at, detected_at=detected_at,
            confidence=grade.confidence, rule=grade.rule)

    @property
    def grade(self) -> Grade:
        """An Xid by NVIDIA's bucket for it (rule `xid-N`, as in a job's log); a health finding by
        its severity."""
        if self.xid is not None:
            return xid_grade(self.xid)
        return gpu_health_grade(self.rule, critical=self.severity is Severity.CRITICAL)
