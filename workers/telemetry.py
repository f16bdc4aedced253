"""OpenTelemetry metrics and traces: where they go. Detection's instruments are defined here too.

Instruments come from the global meter, so code records without knowing where metrics go (the
recovery activities' own are in activities.metrics). `setup_metrics` installs the SDK provider
once per process: always a Prometheus exposition for `/metrics` (workers.prometheus); with
`metrics_file` set, JSON every `interval_s` to that file (one document per export); with an
OTLP/HTTP endpoint, the same metrics pushed to a collector. `setup_tracing` installs a tracer
provider exporting over OTLP, so the spans of temporalio's TracingInterceptor (workers.client)
leave the process; without an endpoint there is none, and spans cost nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter, Histogram, Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from activities.metrics import RecoveryMetrics
from goodput import metric_series
from goodput.extras import require
from workers.prometheus import Exposition, publish

SERVICE = Resource.create({"service.name": "goodput"})

# Seconds, with buckets where the interesting differences are (sub-second vs minutes).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class Instruments:
    detection_latency: Histogram
    submit_latency: Histogram
    anomalies: Counter
    incidents_opened: Counter

    def counters(self) -> dict[str, Counter]:
        return {"goodput.anomalies": self.anomalies, "goodput.incidents.opened": self.incidents_opened}


def instruments(meter: Meter | None = None) -> Instruments:
    meter = meter or metrics.get_meter("goodput")
    return Instruments(
        detection_latency=meter.create_histogram(
            "goodput.detection.latency", unit="s", explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
            description="from when a failure was observed (log line read, metric sampled, state seen) to its "
                        "anomaly being detected"),
        submit_latency=meter.create_histogram(
            "goodput.anomaly.submit.latency", unit="s", explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
            description="from detection to the incident workflow accepting the anomaly (signal-with-start)"),
        anomalies=meter.create_counter("goodput.anomalies", description="anomalies submitted, by source and kind"),
        incidents_opened=meter.create_counter(
            "goodput.incidents.opened",
            description="incidents this process's detectors opened (the anomaly started a new incident), by source"),
    )


def start_at_zero(clusters: Iterable[str] = (), meter: Meter | None = None) -> None:
    """Adds 0 to every counter for every known label set (goodput.metric_series), on the global
    meters the recorders use unless one is given (tests), so each series exists from start-up."""
    by_name = {**instruments(meter).counters(), **RecoveryMetrics(meter).counters()}
    for series in metric_series.counters(clusters):
        for labels in series.label_sets:
            by_name[series.name].add(0, dict(labels))


def otlp_url(endpoint: str, signal: str) -> str:
    """`http://collector:4318` + `metrics` → `http://collector:4318/v1/metrics`, as the
    OTEL_EXPORTER_OTLP_ENDPOINT convention builds each signal's URL from one base."""
    return f"{endpoint.rstrip('/')}/v1/{signal}"


def setup_metrics(metrics_file: Path | None, interval_s: float = 30.0,
                  readers: tuple[MetricReader, ...] = (), *, otlp_endpoint: str = "",
                  clusters: Iterable[str] = ()) -> MeterProvider:
    """Installs the process's MeterProvider (the first call wins: OpenTelemetry keeps the first
    global provider), its counters at 0 for every known label set (`clusters`: the breaker's).
    Shut the returned provider down at exit: it flushes the last exports."""
    exposition = Exposition()  # pull-based: costs nothing until something scrapes /metrics
    all_readers = [*readers, exposition.reader]
    if metrics_file is not None:
        metrics_file.parent.mkdir(parents=True, exist_ok=True)
        out: TextIO = metrics_file.open("a", encoding="utf-8")  # lives as long as the process
        all_readers.append(PeriodicExportingMetricReader(
            ConsoleMetricExporter(out=out), export_interval_millis=int(interval_s * 1000)))
    if otlp_endpoint:
        # Headers, TLS files, timeout and compression: the standard OTEL_EXPORTER_OTLP_* variables.
        exporter = require("otlp-metrics").OTLPMetricExporter(endpoint=otlp_url(otlp_endpoint, "metrics"))
        all_readers.append(PeriodicExportingMetricReader(
            exporter,
            export_interval_millis=int(interval_s * 1000)))
    provider = MeterProvider(metric_readers=all_readers, resource=SERVICE)
    metrics.set_meter_provider(provider)
    if metrics.get_meter_provider() is provider:
        start_at_zero(clusters)
        publish(exposition)  # only the installed provider sees the global meter's instruments
    return provider


def setup_tracing(otlp_endpoint: str) -> TracerProvider | None:
    """Installs a tracer provider exporting spans in batches to the OTLP/HTTP endpoint; None (and
    nothing installed) without one. Shut it down at exit: it flushes the spans still queued."""
    if not otlp_endpoint:
        return None
    provider = TracerProvider(resource=SERVICE)
    exporter = require("otlp-traces").OTLPSpanExporter(endpoint=otlp_url(otlp_endpoint, "traces"))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider
