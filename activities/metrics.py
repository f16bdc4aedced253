"""What recovery did, as OpenTelemetry metrics: action latency, drains, closed incidents, lost work.

Recorded in the activities, never in workflow code: a workflow replays its history, and a counter
bumped there would count every replay again. Activities run at least once instead, so each
instrument says what keeps a retried activity from counting twice:

* `goodput.action.latency` and `goodput.drains` are recorded only when the scheduler reports the
  change as made by this very call (`ActionResult.changed`). A retry finds the node drained, the
  job requeued or the copy submitted, and records nothing. A worker that dies between Slurm acting
  and the recording loses that one sample: at most once, never twice.
* `goodput.incidents.closed`, `goodput.lost_gpu_hours` and `goodput.breaker.trips` come from the
  `notify` and `audit` activities, which are retried whole; they are keyed (incident and terminal
  state, audit record id) and this process remembers the keys it counted. A retry on another
  worker after a crash may count again; the crashed worker's counters are gone with it (to
  Prometheus, a counter reset).

Instruments come from the global meter unless one is given (tests), like `workers.telemetry`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Meter

from goodput.recover.audit import AuditAction, AuditRecord
from goodput.recover.incident import Notification
from goodput.recover.lifecycle import OUTCOME_OF

# Seconds from a failure being observable to Slurm accepting the action: the coalesce window,
# attribution and the breaker take seconds; an approval in approve mode can take hours.
ACTION_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0)
# Keys remembered against retries; a retry comes within minutes, so the oldest may be forgotten.
REMEMBERED_KEYS = 10_000


class Once:
    """Keys this process has counted; `first` is true once per key (the oldest are forgotten)."""

    def __init__(self, size: int = REMEMBERED_KEYS) -> None:
        self._size = size
        self._seen: OrderedDict[str, None] = OrderedDict()

    def first(self, key: str) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self._size:
            self._seen.popitem(last=False)
        return True


class RecoveryMetrics:
    def __init__(self, meter: Meter | None = None) -> None:
        meter = meter or metrics.get_meter("goodput.recovery")
        self.action_latency = meter.create_histogram(
            "goodput.action.latency", unit="s", explicit_bucket_boundaries_advisory=ACTION_BUCKETS,
            description="from when the incident's failure was first observable (its earliest anomaly's "
                        "observed_at) to Slurm accepting a recovery action, by action")
        self.drains = meter.create_counter(
            "goodput.drains", description="nodes goodput drained (Slurm accepted the drain)")
        self.incidents_closed = meter.create_counter(
            "goodput.incidents.closed", description="incidents that reached an outcome, by category and outcome")
        self.lost_gpu_hours = meter.create_counter(
            "goodput.lost_gpu_hours", unit="h",
            description="GPU-hours of training redone after failures (since the last checkpoint), by category, "
                        "counted when the incident closes")
        self.breaker_trips = meter.create_counter(
            "goodput.breaker.trips", description="drain breaker trips, by cluster")
        self._closed = Once()
        self._trips = Once()

    def counters(self) -> dict[str, Counter]:
        return {"goodput.drains": self.drains, "goodput.incidents.closed": self.incidents_closed,
                "goodput.lost_gpu_hours": self.lost_gpu_hours, "goodput.breaker.trips": self.breaker_trips}

    def accepted(self, action: AuditAction, observed_at: datetime | None) -> None:
        """Slurm accepted one action (one node's drain, a requeue, a resubmission, a stop) just now."""
        if action is AuditAction.DRAIN:
            self.drains.add(1)
        if observed_at is not None:
            # Clocks of the node that observed and the worker differ a little: never negative.
            elapsed = max(0.0, (datetime.now(UTC) - observed_at).total_seconds())
            self.action_latency.record(elapsed, {"action": action.value})

    def notified(self, notification: Notification) -> None:
        """An incident's notification; the one of its terminal state closes it."""
        outcome = OUTCOME_OF.get(notification.state)
        if outcome is None or not self._closed.first(f"{notification.incident_id}\0{notification.state}"):
            return
        category = notification.category.value if notification.category else "unknown"
        self.incidents_closed.add(1, {"category": category, "outcome": outcome.value})
        if notification.lost_work is not None and notification.lost_work.gpu_hours > 0:
            self.lost_gpu_hours.add(notification.lost_work.gpu_hours, {"category": category})

    def audited(self, records: Sequence[AuditRecord]) -> None:
        for record in records:
            if record.action is AuditAction.BREAKER_TRIP and self._trips.first(record.id):
                self.breaker_trips.add(1, {"cluster": record.cluster})
