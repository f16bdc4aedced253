"""Which GPU probe a node agent reads: NVML, DCGM's exporter, or none, opened and closed around its loop.

The agent's loop (`activities.adapters.node_agent`) gets a `GpuProbe` or None and never knows which
source is behind it; choosing and opening one (pynvml is loaded only when the probe is NVML, on a
node whose driver has it) is this module's one concern.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from activities.adapters.dcgm import DcgmScraper
from activities.adapters.gpu_nvml import NvmlCollector, NvmlGpuProbe
from goodput.detect.gpu import GpuProbe
from goodput.detect.node_agent import ProbeKind


@contextlib.asynccontextmanager
async def probe_from(kind: ProbeKind, dcgm_url: str, *, node: str | None = None) -> AsyncIterator[GpuProbe | None]:
    """The real probe, opened and closed; pynvml is imported only when `kind` is nvml.

    DCGM's scraper is built with `report_existing=False`: its Xid gauge holds the last Xid since
    the exporter started, possibly days old, and must not be pinned on the job running now (the
    kernel log, read from the state file's cursor, covers Xids that fell in the agent's downtime).
    """
    if kind == "none":
        yield None
    elif kind == "dcgm":
        async with DcgmScraper(dcgm_url, node=node, report_existing=False) as scraper:
            yield scraper
    else:
        collector = NvmlCollector(node=node)
        await asyncio.to_thread(collector.open)
        try:
            yield NvmlGpuProbe(collector)
        finally:
            await asyncio.to_thread(collector.close)
