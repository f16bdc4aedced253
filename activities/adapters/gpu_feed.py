"""The node agent's GPU feed: its latest sample of each GPU, POSTed to the service every few heartbeats.

The service compares GPUs across all of a job's nodes (stragglers, hung collectives); only the
agent can read them. This loop runs beside the heartbeat's, on the same URL and token, and sends
only samples newer than the last it sent: a probe hung since (NVML blocking on a failing GPU) must
not be reported as a fresh reading of healthy GPUs, so the service's window simply stops filling
and ages out. A failed POST is counted and logged when the error starts or changes
(`activities.adapters.heartbeat.AgentPoster`); nothing is queued (the next report supersedes it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import httpx

from activities.adapters.heartbeat import AgentPoster, PostCounts
from goodput.detect.gpu import GpuSample
from goodput.detect.gpu_feed import GpuReport

GPU_SAMPLES_PATH = "/v1/gpu-samples"
Latest = Callable[[], tuple[int, Sequence[GpuSample]]]
"""The agent's latest samples and their sequence number (the tick that read them)."""


class GpuFeedSender(PostCounts):
    """POSTs a `GpuReport` of the node's latest samples to `<url>/v1/gpu-samples` with the node's token."""

    def __init__(self, url: str, token: str, *, cluster: str, node: str, interval_s: float) -> None:
        self._poster = AgentPoster(url, GPU_SAMPLES_PATH, token, what="GPU report")
        self.cluster, self.node, self.interval_s = cluster, node, interval_s
        self._sent_seq: int | None = None

    async def run(self, stop: asyncio.Event, latest: Latest) -> None:
        async with httpx.AsyncClient(timeout=max(1.0, self.interval_s), trust_env=False) as session:
            while not stop.is_set():
                await self.send(session, latest)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)

    async def send(self, session: httpx.AsyncClient, latest: Latest) -> bool:
        seq, samples = latest()
        if not samples or seq == self._sent_seq:
            return False
        body = GpuReport.of(self.cluster, self.node, samples).model_dump(mode="json", exclude_none=True)
        if await self._poster.post(session, body) is None:
            return False
        self._sent_seq = seq
        return True
