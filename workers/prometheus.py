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

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Exposition:
    """One metric reader and the registry it renders from; add `reader` to a MeterProvider."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        # No otel_scope_* labels: the metric names already say they are goodput's.
        self.reader = PrometheusMetricReader(registry=self.registry, scope_info_enabled=False)
        # The reader's collector queues each collection and drains the queue while rendering:
        # two scrapes at once could render one collection twice (duplicate series).
        self._lock = threading.Lock()

    def render(self) -> bytes:
        with self._lock:
            return generate_latest(self.registry)


_published: Exposition | None = None


def publish(exposition: Exposition | None) -> None:
    """Makes `exposition` the one `/metrics` serves in this process (None: none)."""
    global _published
    _published = exposition


def published() -> Exposition | None:
    return _published
