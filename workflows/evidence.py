"""An incident's evidence: the `anomaly` signal that folds detections in, and what it tells back.

Detectors deliver at least once (a signal retried after a lost reply, a watcher that resumes on
another worker and reads a few lines again), so evidence is deduplicated by anomaly id. Log
anomalies also carry how far into each job file their lines went; the incident keeps the furthest
mark per file and a resumed log watcher asks for them (`log_marks`), so it neither sends those
lines again nor loses the new ones read with them (goodput.detect.log_marks). A base class of
RecoveryWorkflow, like NodeLinks: the signal and query only record, they never schedule anything.
The evidence kept is bounded; once full, anomalies the attribution set aside as evidence only
(pushed lines that are not the job's own output) give way to new ones, so that a flood of forged
lines cannot crowd the job's real failure out of its incident.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from goodput.detect.log_marks import merge
    from goodput.models import Anomaly, LogMark
    from goodput.recover.incident import MAX_REPORTED_ANOMALIES


class Evidence:
    _anomalies: list[Anomaly]
    _anomaly_count: int
    _seen_ids: set[str]
    _set_aside: set[str]
    _log_marks: tuple[LogMark, ...]

    @workflow.signal
    def anomaly(self, anomaly: Anomaly) -> None:
        self._log_marks = merge(self._log_marks, anomaly.log_marks)  # a repeat may still reach further
        if anomaly.id in self._seen_ids:
            return  # a detector retrying the same signal is not new evidence
        self._seen_ids.add(anomaly.id)
        self._anomaly_count += 1
        if len(self._anomalies) >= MAX_REPORTED_ANOMALIES:
            # Full: the oldest anomaly set aside as evidence only (pushed lines that are not the
            # job's own output) makes room; without one, the newest is counted, not kept.
            oldest = next((i for i, kept in enumerate(self._anomalies) if kept.id in self._set_aside), None)
            if oldest is None:
                return
            self._set_aside.discard(self._anomalies.pop(oldest).id)
        self._anomalies.append(anomaly)

    @workflow.query
    def log_marks(self) -> tuple[LogMark, ...]:
        """The furthest line per job file that reached this incident from a log watcher."""
        return self._log_marks
