"""The agents' GPU feed: what a node agent sends about its GPUs, and the service's bounded memory of it.

`straggler_case` and `gpu_hang` compare GPU samples across *all* a job's nodes, but each agent only
sees its own node. So every few heartbeats an agent POSTs a compact report of its latest sample
per GPU (`GpuReport`) to the liveness listener, authenticated by the node's own token, and the
service keeps a short window of reports per node (`GpuSampleStore`). The wire model is the trust
boundary: every field bounded, NaN and infinities refused, unknown keys refused, at most
`MAX_GPUS` GPUs; the clock-event reasons are decoded here from the mask, never taken as names
from the node, and the node a sample belongs to is the one the token proves, never a field.

The store is bounded in all three directions (nodes x reports per node x GPUs per report) and
forgets reports older than `max_age_s`, so a node whose agent stopped sending stops explaining
anything. It holds what arrived in this process's memory only: after a restart the window
refills within one feed interval.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from goodput.detect.gpu import GpuSample, decode_clock_event_reasons, normalize_pci_bus_id
from goodput.identifiers import validate_node_name

MAX_GPUS = 64
"""GPUs in one report: eight is usual, sixteen the most shipped in one node; four times that is room."""
MAX_REPORT_BYTES = 32 << 10
"""A report of 64 GPUs with every field is about 20 KiB of JSON; the body is refused past this."""
_MAX_COUNTER = (1 << 63) - 1


class FeedGpu(BaseModel):
    """One GPU of a report: the fields the cross-node comparisons use, each optional (NVML refuses some)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    index: int | None = Field(default=None, ge=0, le=1023)
    uuid: str | None = Field(default=None, max_length=96, pattern=r"^[A-Za-z0-9-]+$")
    pci_bus_id: str | None = Field(default=None, max_length=32, pattern=r"^[0-9A-Fa-f:.]+$")
    utilisation_pct: float | None = Field(default=None, ge=0.0, le=100.0)
    memory_utilisation_pct: float | None = Field(default=None, ge=0.0, le=100.0)
    """NVML's memory utilisation: the time device memory was read or written (bandwidth activity)."""
    sm_clock_mhz: float | None = Field(default=None, ge=0.0, le=10_000.0)
    max_sm_clock_mhz: float | None = Field(default=None, ge=0.0, le=10_000.0)
    power_w: float | None = Field(default=None, ge=0.0, le=10_000.0)
    temperature_c: float | None = Field(default=None, ge=-60.0, le=250.0)
    clock_event_mask: int | None = Field(default=None, ge=0, le=0xFFFFFFFFFFFFFFFF)
    pcie_replay_count: int | None = Field(default=None, ge=0, le=_MAX_COUNTER)
    nvlink_error_count: int | None = Field(default=None, ge=0, le=_MAX_COUNTER)
    gpu_lost: bool = False

    @classmethod
    def of(cls, sample: GpuSample) -> FeedGpu:
        """The agent's side: a value the model would refuse (a driver's sentinel) is sent as unknown,
        so that one odd reading never costs the node its whole report."""
        values: dict[str, object] = {name: getattr(sample, name, None) for name in cls.model_fields}
        if isinstance(sample.pci_bus_id, str):
            values["pci_bus_id"] = normalize_pci_bus_id(sample.pci_bus_id)
        try:
            return cls.model_validate(values)
        except ValidationError as err:
            refused = {e["loc"][0] for e in err.errors() if e["loc"]}
            return cls.model_validate({k: v for k, v in values.items() if k not in refused})

    def sample(self, node: str, received_at: datetime) -> GpuSample:
        """The service's side: the node is the authenticated one, the time the service's own."""
        mask = self.clock_event_mask
        return GpuSample(
            index=self.index, uuid=self.uuid, pci_bus_id=self.pci_bus_id, node=node, observed_at=received_at,
            utilisation_pct=self.utilisation_pct, memory_utilisation_pct=self.memory_utilisation_pct,
            sm_clock_mhz=self.sm_clock_mhz, max_sm_clock_mhz=self.max_sm_clock_mhz, power_w=self.power_w,
            temperature_c=self.temperature_c, clock_event_mask=mask,
            clock_event_reasons=decode_clock_event_reasons(mask) if mask is not None else None,
            pcie_replay_count=self.pcie_replay_count, nvlink_error_count=self.nvlink_error_count,
            gpu_lost=self.gpu_lost)


class GpuReport(BaseModel):
    """`POST /v1/gpu-samples`: one node's latest sample of each of its GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    cluster: str = Field(max_length=64)
    node: str = Field(max_length=255)
    gpus: tuple[FeedGpu, ...] = Field(max_length=MAX_GPUS)

    def checked_node(self) -> str:
        return validate_node_name(self.node)

    @classmethod
    def of(cls, cluster: str, node: str, samples: Iterable[GpuSample]) -> GpuReport:
        return cls(cluster=cluster, node=node, gpus=tuple(FeedGpu.of(s) for s in samples)[:MAX_GPUS])


Report = tuple[datetime, tuple[GpuSample, ...]]


class GpuSampleStore:
    """The latest `window` reports of each of at most `max_nodes` nodes, none older than `max_age_s`."""

    def __init__(self, *, window: int, max_age_s: float, max_nodes: int) -> None:
        if window < 2 or max_age_s <= 0 or max_nodes < 1:
            raise ValueError("a GPU sample store needs window >= 2, max_age_s > 0 and max_nodes >= 1")
        self.window, self.max_age, self.max_nodes = window, timedelta(seconds=max_age_s), max_nodes
        self._reports: OrderedDict[str, deque[Report]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._reports)

    def put(self, node: str, received_at: datetime, samples: Sequence[GpuSample]) -> bool:
        """False (nothing kept) when the store is full of nodes heard within `max_age_s`."""
        self.expire(received_at)
        reports = self._reports.get(node)
        if reports is None:
            if len(self._reports) >= self.max_nodes:
                return False
            reports = self._reports[node] = deque(maxlen=self.window)
        reports.append((received_at, tuple(samples[:MAX_GPUS])))
        self._reports.move_to_end(node)  # the least recently heard node is at the front
        return True

    def expire(self, now: datetime) -> None:
        while self._reports:
            node, reports = next(iter(self._reports.items()))
            if reports and now - reports[-1][0] <= self.max_age:
                break
            del self._reports[node]
        for reports in self._reports.values():  # the older reports of nodes still heard
            while reports and now - reports[0][0] > self.max_age:
                reports.popleft()

    def reports(self, node: str, now: datetime) -> list[Report]:
        """The node's reports within `max_age_s` of `now`, oldest first."""
        return [r for r in self._reports.get(node, ()) if timedelta(0) <= now - r[0] <= self.max_age]

    def windows(self, nodes: Iterable[str], now: datetime) -> dict[str, list[Report]]:
        return {node: found for node in dict.fromkeys(nodes) if (found := self.reports(node, now))}

    def latest_and_oldest(self, nodes: Iterable[str], now: datetime) -> tuple[list[GpuSample], list[GpuSample]]:
        """Every GPU of `nodes` as last reported, and as first reported within the window (what
        counter growth is measured against)."""
        latest: list[GpuSample] = []
        oldest: list[GpuSample] = []
        for reports in self.windows(nodes, now).values():
            latest.extend(reports[-1][1])
            if len(reports) > 1:
                oldest.extend(reports[0][1])
        return latest, oldest

