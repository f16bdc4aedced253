"""Every label value goodput's metrics may carry, known before anything happens.

Two reasons this list exists. Counters are set to 0 for every known label set at start-up, so a
Prometheus series exists (at 0) before the first incident: alerts and dashboards can be written
against it, and `increase()` sees the first event as a step from 0 instead of missing it. And it
is the one place that says which values a label may take: every value comes from an enum of the
domain (never from a job's name, comment, log line or anything else a user controls), so the
number of series is bounded and nothing a job writes ends up in the exposition.

The one label that is not an enum is `cluster` (the breaker's): it is the deployment's configured
cluster name, checked by `goodput.identifiers.validate_cluster`; start-up zeroes it for the
clusters the process knows of (its own setting).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product

from goodput.models import AnomalyKind, AnomalySource, Category, Outcome
from goodput.recover.audit import AuditAction

# The actions whose latency is recorded (activities.metrics.RecoveryMetrics.accepted).
TIMED_ACTIONS = (AuditAction.DRAIN, AuditAction.REQUEUE, AuditAction.RESUBMIT, AuditAction.STOP)

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Series:
    """One instrument (its OpenTelemetry name) and every label set it is known to record."""

    name: str
    label_sets: tuple[Labels, ...]


def _combinations(**values: Iterable[str]) -> tuple[Labels, ...]:
    keys = tuple(values)
    return tuple(dict(zip(keys, combo, strict=True)) for combo in product(*values.values()))


def anomaly_labels(source: AnomalySource, kind: AnomalyKind) -> dict[str, str]:
    """The labels of the anomaly instruments: enums only (an anomaly's free text never is one)."""
    return {"source": AnomalySource(source).value, "kind": AnomalyKind(kind).value}


ANOMALY_LABELS = _combinations(source=[s.value for s in AnomalySource], kind=[k.value for k in AnomalyKind])
CATEGORIES = tuple(c.value for c in Category)


def counters(clusters: Iterable[str] = ()) -> tuple[Series, ...]:
    """The counters and the label sets each starts at 0 with (`clusters`: the breaker's)."""
    return (
        Series("goodput.anomalies", ANOMALY_LABELS),
        Series("goodput.incidents.opened", _combinations(source=[s.value for s in AnomalySource])),
        Series("goodput.incidents.closed", _combinations(category=CATEGORIES, outcome=[o.value for o in Outcome])),
        Series("goodput.lost_gpu_hours", _combinations(category=CATEGORIES)),
        Series("goodput.drains", ({},)),
        Series("goodput.breaker.trips", _combinations(cluster=sorted(set(clusters)))),
    )


def histograms() -> tuple[Series, ...]:
    """The histograms and the label sets they record (they appear with their first observation:
    docs/operations.md, Metrics)."""
    return (
        Series("goodput.detection.latency", ANOMALY_LABELS),
        Series("goodput.anomaly.submit.latency", ANOMALY_LABELS),
        Series("goodput.action.latency", _combinations(action=[a.value for a in TIMED_ACTIONS])),
    )


def known(name: str, labels: Labels, clusters: Iterable[str] = ()) -> bool:
    """Whether `labels` is a label set the instrument `name` is known to record."""
    for series in (*counters(clusters), *histograms()):
        if series.name == name:
            return dict(labels) in [dict(s) for s in series.label_sets]
    return False
