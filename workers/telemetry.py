"""OpenTelemetry metrics: detection latency and anomaly flow as histograms and counters.

Instruments come from the global meter, so code records without knowing where metrics go.
`setup_metrics` installs the SDK provider once per process; with `metrics_file` set, it exports
every `interval_s` as JSON (one document per export) to that file — point a collector's file
receiver at it, or swap the exporter for OTLP where the exporter package is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Histogram, Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

# Seconds, with buckets where the interesting differences are (sub-second vs minutes).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class Instruments:
    detection_latency: Histogram
    submit_latency: Histogram
    anomalies: Counter


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
    )


def setup_metrics(metrics_file: Path | None, interval_s: float = 30.0,
                  readers: tuple[MetricReader, ...] = ()) -> MeterProvider:
    all_readers = list(readers)
    if metrics_file is not None:
        metrics_file.parent.mkdir(parents=True, exist_ok=True)
        out: TextIO = metrics_file.open("a", encoding="utf-8")  # lives as long as the process
        all_readers.append(PeriodicExportingMetricReader(
            ConsoleMetricExporter(out=out), export_interval_millis=int(interval_s * 1000)))
    provider = MeterProvider(metric_readers=all_readers,
                             resource=Resource.create({"service.name": "goodput"}))
    metrics.set_meter_provider(provider)
    return provider
