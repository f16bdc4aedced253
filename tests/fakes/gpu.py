"""A scriptable `GpuProbe` for tests and the demo: no driver, no exporter, same shape.

Samples come from a script (one batch per `sample()` call, the last batch repeating) or are set
outright; Xid events are pushed and handed out once, like NVML's event set does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from goodput.detect.gpu import GpuSample, XidEvent


def healthy_gpus(node: str = "node1", count: int = 8, *, utilisation: float = 97.0,
                 sm_clock: float = 1980.0, power: float = 690.0) -> list[GpuSample]:
    """Eight busy, error-free H200-like GPUs: the baseline a scenario perturbs."""
    return [GpuSample(index=i, uuid=f"GPU-{node}-{i:04d}", pci_bus_id=f"0000:{0x18 + 0x10 * i:02x}:00.0",
                      name="NVIDIA H200", node=node, utilisation_pct=utilisation, sm_clock_mhz=sm_clock,
                      power_w=power, temperature_c=55.0, ecc_volatile_corrected=0,
                      ecc_volatile_uncorrected=0, ecc_aggregate_corrected=0, ecc_aggregate_uncorrected=0,
                      row_remap_pending=False, row_remap_failure=False, clock_event_reasons=(),
                      pcie_replay_count=0, nvlink_error_count=0)
            for i in range(count)]


class FakeGpuProbe:
    """Implements `goodput.detect.gpu.GpuProbe`."""

    def __init__(self, script: Sequence[Sequence[GpuSample]] = ()) -> None:
        self._script = [list(batch) for batch in script]
        self._current: list[GpuSample] = []
        self._xids: list[XidEvent] = []
        self._arrived = asyncio.Event()
        self.sample_calls = 0

    def set_samples(self, samples: Sequence[GpuSample]) -> None:
        self._script.clear()
        self._current = list(samples)

    def push_xid(self, *events: XidEvent) -> None:
        self._xids.extend(events)
        self._arrived.set()

    async def sample(self) -> Sequence[GpuSample]:
        self.sample_calls += 1
        if self._script:
            self._current = self._script.pop(0)
        return list(self._current)

    async def poll_xid_events(self, timeout_ms: int) -> Sequence[XidEvent]:
        if not self._xids and timeout_ms > 0:
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout_ms / 1000)
            except TimeoutError:
                return []
        events, self._xids = self._xids, []
        self._arrived.clear()
        return events
