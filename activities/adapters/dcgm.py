"""Scraping a dcgm-exporter `/metrics` endpoint into `GpuSample`s (a `GpuProbe` over HTTP).

On clusters that already run dcgm-exporter this is the GPU probe: no agent of ours on the node.
Every failure (timeout, refused connection, 5xx, an HTML login page, a body that is not DCGM's)
becomes one `DcgmScrapeError` that says which URL, what went wrong and whether retrying can help;
the caller (an activity) maps `retryable` onto Temporal's retry policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import TracebackType

import httpx

from goodput.detect.dcgm import ExpositionError, parse_exposition, samples_from_metrics
from goodput.detect.gpu import GpuSample, XidEvent

MAX_BODY_BYTES = 32 << 20  # a full dcgm-exporter page for 8 GPUs is ~100 kB; 32 MiB is surely wrong


class DcgmScrapeError(Exception):
    def __init__(self, url: str, message: str, *, retryable: bool) -> None:
        super().__init__(f"DCGM scrape of {url} failed: {message}")
        self.url = url
        self.retryable = retryable


def _utcnow() -> datetime:
    return datetime.now(UTC)


class DcgmScraper:
    """Implements `goodput.detect.gpu.GpuProbe`.

    DCGM only exposes the *last* Xid per GPU as a gauge, so Xid events are its changes between
    scrapes (a non-zero value on the first scrape counts, unless `report_existing=False`); the
    same Xid twice in a row is invisible here, which is why the kernel log is read as well.
    """

    def __init__(self, url: str, *, client: httpx.AsyncClient | None = None, timeout_s: float = 5.0,
                 node: str | None = None, report_existing: bool = True,
                 max_bytes: int = MAX_BODY_BYTES, clock: Callable[[], datetime] = _utcnow) -> None:
        self.url = url
        self._own_client = client is None
        # Exporters sit on the cluster network; an operator's HTTP(S)_PROXY must not capture them.
        self._client = client or httpx.AsyncClient(timeout=timeout_s, trust_env=False)
        self._timeout = timeout_s
        self._node = node
        self._report_existing = report_existing
        self._max_bytes = max_bytes
        self._clock = clock
        self._last_xid: dict[tuple[str | None, str], int] = {}
        self._pending: list[XidEvent] = []

    async def __aenter__(self) -> DcgmScraper:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def fetch(self) -> str:
        """The exposition text, or a `DcgmScrapeError`."""
        try:
            async with self._client.stream("GET", self.url, timeout=self._timeout) as response:
                if response.status_code >= 400:
                    raise DcgmScrapeError(self.url, f"HTTP {response.status_code}",
                                          retryable=response.status_code >= 500 or response.status_code == 429)
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > self._max_bytes:
                        raise DcgmScrapeError(self.url, f"body larger than {self._max_bytes} bytes",
                                              retryable=False)
        except httpx.TimeoutException as err:
            raise DcgmScrapeError(self.url, f"timed out after {self._timeout:g}s ({type(err).__name__})",
                                  retryable=True) from err
        except httpx.HTTPError as err:
            raise DcgmScrapeError(self.url, f"{type(err).__name__}: {err}", retryable=True) from err
        return body.decode("utf-8", errors="replace")

    async def scrape(self) -> list[GpuSample]:
        text = await self.fetch()
        observed_at = self._clock()
        try:
            # Both steps read the exporter's bytes; either may refuse them with ExpositionError.
            metrics = parse_exposition(text)
            samples = samples_from_metrics(metrics, observed_at=observed_at, node=self._node)
        except ExpositionError as err:
            raise DcgmScrapeError(self.url, f"not a Prometheus text exposition ({err})",
                                  retryable=False) from err
        if not samples:
            raise DcgmScrapeError(self.url, "no DCGM_FI_* GPU metrics in the response "
                                  "(is this a dcgm-exporter?)", retryable=False)
        self._observe(samples)
        return samples

    def _observe(self, samples: Sequence[GpuSample]) -> None:
        for sample in samples:
            if sample.last_xid is None:
                continue
            key = (sample.node, sample.uuid or sample.pci_bus_id or str(sample.index))
            before = self._last_xid.get(key)
            self._last_xid[key] = sample.last_xid
            first_seen = before is None
            if sample.last_xid and sample.last_xid != before and (self._report_existing or not first_seen):
                self._pending.extend(sample.xid_events)

    async def sample(self) -> Sequence[GpuSample]:
        return await self.scrape()

    async def poll_xid_events(self, timeout_ms: int) -> Sequence[XidEvent]:
        """One scrape (DCGM cannot push), then the Xid changes seen since the previous call."""
        await self.scrape()
        events, self._pending = self._pending, []
        return events
