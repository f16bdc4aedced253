"""goodput's OpenTelemetry metrics in Prometheus's text format, for a `/metrics` endpoint.

Prometheus pulls, the OpenTelemetry SDK aggregates: `PrometheusMetricReader` bridges the two, each
scrape collecting the provider's cumulative state. It registers into a `CollectorRegistry` of its
own, never prometheus_client's global one, which refuses a second collector of the same metric
names: tests (and a second `setup_metrics` in one process) build more than one. The process's
exposition is published here so `workers.metrics_endpoint` serves the provider that
`setup_metrics` installed globally, wherever the console mounts it.

Names follow the OpenTelemetry-to-Prometheus rules: dots become underscores, the unit is
appended (`s` → `_seconds`), counters end `_total`; so `goodput.detection.latency` is the
histogram `goodput_detection_latency_seconds` (`_bucket`, `_sum`, `_count`).
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics.export import MetricsData
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

CONTENT_TYPE = CONTENT_TYPE_LATEST


class ExpositionUnavailableError(RuntimeError):
    """Why `/metrics` cannot answer with the full exposition now (the endpoint says 503 and this)."""


class _ScrapeReader(PrometheusMetricReader):
    """A PrometheusMetricReader that takes in only the collection its own scrape made.

    The reader's collector queues every collection it receives and a scrape renders all it finds
    queued: a collection made outside a scrape (`MeterProvider.force_flush`, shutdown) would be
    rendered beside the scrape's own, each metric family twice, which Prometheus rejects whole.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        # No otel_scope_* labels: the metric names already say they are goodput's.
        super().__init__(registry=registry, scope_info_enabled=False)
        self.scraping_thread: int | None = None

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        if self.scraping_thread is not None and threading.get_ident() == self.scraping_thread:
            super()._receive_metrics(metrics_data, timeout_millis, **kwargs)


class Exposition:
    """One metric reader and the registry it renders from; add `reader` to a MeterProvider.

    A render is one collection, rendered under one lock, checked before it is served: never an
    empty body (a target that is up with no series makes alerts flap) nor a family twice.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.reader = _ScrapeReader(self.registry)
        self._lock = threading.Lock()

    def render(self) -> bytes:
        """The full exposition; ExpositionUnavailableError (with the reason) when there is none."""
        with self._lock:
            self.reader.scraping_thread = threading.get_ident()
            try:
                body = generate_latest(self.registry)
            except Exception as err:  # an instrument's callback or the SDK's collect failed
                raise ExpositionUnavailableError(f"collecting the metrics failed: {type(err).__name__}: {err}") from err
            finally:
                self.reader.scraping_thread = None
        check(body)
        return body


def check(body: bytes) -> None:
    """Refuses an exposition Prometheus would read as no series or reject: empty, or a family twice."""
    if not body.strip():
        raise ExpositionUnavailableError(
            "no metrics to expose: the meter provider has recorded nothing or is shut down "
            "(setup_metrics sets goodput's counters to 0 at start-up; this process may be stopping)")
    families = [line.split(b" ")[2] for line in body.splitlines() if line.startswith(b"# TYPE ")]
    duplicated = sorted({name.decode() for name in families if families.count(name) > 1})
    if duplicated:
        raise ExpositionUnavailableError(f"metric families rendered twice: {', '.join(duplicated)}")


_published: Exposition | None = None


def publish(exposition: Exposition | None) -> None:
    """Makes `exposition` the one `/metrics` serves in this process (None: none)."""
    global _published
    _published = exposition


def published() -> Exposition | None:
    return _published
