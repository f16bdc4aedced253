"""Hang detection: no progress for much longer than this job's own rhythm says it should take.

A fixed timeout is wrong for every job: 5 minutes is forever for 1-second steps and normal for a
15-minute evaluation. The threshold here is k x the p99 of the job's recent intervals between
progress lines (not its per-step time: Megatron prints every `log_interval` steps), never below a
floor, once the rhythm is learned and regular. Until then, or when the intervals spread widely
(a job whose output says little about its rhythm), a conservative window applies. Phases slow by
nature (goodput.detect.phases: checkpoint saves and loads, evaluation, data-loader warm-up, and
start-up before the first step) get their own bounded windows, open from their start line until
their end line or the next step; intervals that span one are not part of the rhythm. The state is
an immutable value folded over progress events, so a workflow can carry it and replay it; it is
bounded (the last `rhythm_window` intervals, one open phase).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from datetime import datetime

from pydantic import Field

from goodput.detect.phases import Phase
from goodput.detect.progress import ProgressEvent, ProgressKind
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen

__all__ = ["DEFAULT_HANG_CONFIG", "HangAssessment", "HangConfig", "Phase", "ProgressState", "assess_hang",
           "hang_anomaly", "p99"]


class HangConfig(Frozen):
    """Shipped defaults and the reasoning behind them: docs/detection.md#hangs."""

    k: float = Field(default=10.0, gt=0.0)
    floor_s: float = Field(default=45.0, ge=0.0)
    # No learned rhythm (fewer than `rhythm_min` intervals, or p99 > rhythm_spread x median).
    unlearned_s: float = Field(default=300.0, ge=0.0)
    rhythm_min: int = Field(default=8, ge=1, le=1000)
    rhythm_spread: float = Field(default=10.0, ge=1.0)
    rhythm_window: int = Field(default=64, ge=1, le=1000)
    # Each slow phase's own window, from its start line (before the first step: from the start).
    startup_grace_s: float = Field(default=1800.0, ge=0.0)
    checkpoint_s: float = Field(default=1200.0, ge=0.0)
    checkpoint_load_s: float = Field(default=1800.0, ge=0.0)
    evaluation_s: float = Field(default=1200.0, ge=0.0)
    data_warmup_s: float = Field(default=900.0, ge=0.0)
    # A job whose launcher restarts hung ranks in-job (NVRx ft_launcher): its heartbeat timeout
    # (typically 3-5 min) answers a hang first; goodput waits at least this long.
    launcher_s: float = Field(default=600.0, ge=0.0)
    window: int = Field(default=20, ge=1, le=1000)  # per-step times kept (for advice and the straggler check)

    def phase_window(self, phase: Phase) -> float:
        return {Phase.STARTUP: self.startup_grace_s, Phase.CHECKPOINT: self.checkpoint_s,
                Phase.CHECKPOINT_LOAD: self.checkpoint_load_s, Phase.EVALUATION: self.evaluation_s,
                Phase.DATA_WARMUP: self.data_warmup_s}.get(phase, self.unlearned_s)


DEFAULT_HANG_CONFIG = HangConfig()


def p99(values: Sequence[float]) -> float:
    """The nearest-rank 99th percentile (the maximum of fewer than 100 values)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class ProgressState(Frozen):
    """What is known about one job attempt's progress; fold events in with `observe`."""

    started_at: datetime
    last_progress_at: datetime | None = None
    last_marker: tuple[int, int] | None = None
    last_step: int | None = None
    step_times: tuple[float, ...] = ()
    # Seconds between successive progress lines with no slow phase between them: the rhythm.
    intervals: tuple[float, ...] = ()
    first_step_at: datetime | None = None
    last_step_at: datetime | None = None  # None while a slow phase makes the next interval meaningless
    phase: Phase | None = None  # the slow phase open now, if any
    phase_since: datetime | None = None
    # An in-job-restarting launcher watches the ranks (the comment's NVRx tag, or a restart seen).
    launcher: bool = False

    @property
    def checkpoint_since(self) -> datetime | None:
        return self.phase_since if self.phase is Phase.CHECKPOINT else None

    def restarted(self, at: datetime) -> ProgressState:
        """The job's launcher restarted its workers in-job at `at`: they start up again and replay
        the steps since their checkpoint, so the step count starts over (the rhythm stays)."""
        return ProgressState(started_at=at, step_times=self.step_times, intervals=self.intervals, launcher=True)

    def observe(self, event: ProgressEvent, at: datetime,
                config: HangConfig = DEFAULT_HANG_CONFIG) -> ProgressState:
        if event.kind in (ProgressKind.CHECKPOINT_START, ProgressKind.PHASE_START):
            phase = Phase.CHECKPOINT if event.kind is ProgressKind.CHECKPOINT_START else event.phase
            if phase is None or phase == self.phase:
                return self  # every rank announcing the same save: the window runs from the first
            return self.model_copy(update={"phase": phase, "phase_since": at, "last_step_at": None})
        if event.kind in (ProgressKind.CHECKPOINT_END, ProgressKind.PHASE_END):
            phase = Phase.CHECKPOINT if event.kind is ProgressKind.CHECKPOINT_END else event.phase
            closed = {"phase": None, "phase_since": None} if phase == self.phase else {}
            return self.model_copy(update={**closed, "last_progress_at": at, "last_step_at": None})
        marker = event.marker
        if marker is not None and self.last_marker is not None and marker <= self.last_marker:
            return self  # another rank echoing a step already seen, or a stale line: not progress
        times = list(self.step_times)
        if event.step_time_s is not None and event.step_time_s > 0:
            times.append(event.step_time_s)
        elif (self.last_progress_at is not None and self.last_step is not None and event.step is not None
              and event.step > self.last_step and marker is not None and self.last_marker is not None
              and marker[0] == self.last_marker[0]):
            elapsed = (at - self.last_progress_at).total_seconds()
            if elapsed > 0:
                times.append(elapsed / (event.step - self.last_step))
        intervals = self.intervals
        if self.last_step_at is not None and at > self.last_step_at:  # lines read together: one interval
            intervals = (*intervals, (at - self.last_step_at).total_seconds())[-config.rhythm_window:]
        return self.model_copy(update={
            "last_progress_at": at, "last_marker": marker or self.last_marker,
            "last_step": event.step if event.step is not None else self.last_step,
            "step_times": tuple(times[-config.window:]), "intervals": intervals,
            "first_step_at": self.first_step_at or at, "last_step_at": at, "phase": None, "phase_since": None})


class HangAssessment(Frozen):
    hung: bool
    phase: Phase
    silent_for_s: float
    threshold_s: float
    step_time_s: float | None = None
    interval_p99_s: float | None = None
    rhythm: bool = False  # whether the threshold came from a learned, regular rhythm
    last_step: int | None = None
    explanation: str


def _rhythm(state: ProgressState, config: HangConfig) -> tuple[float, float | None, bool]:
    """The silence allowed between progress lines, the intervals' p99, and whether it is learned."""
    if not state.intervals:
        return config.unlearned_s, None, False
    high, typical = p99(state.intervals), statistics.median(state.intervals)
    regular = len(state.intervals) >= config.rhythm_min and high <= config.rhythm_spread * typical
    return max(config.k * high, config.floor_s if regular else config.unlearned_s), high, regular


def assess_hang(state: ProgressState, now: datetime,
                config: HangConfig = DEFAULT_HANG_CONFIG) -> HangAssessment:
    step_time = statistics.median(state.step_times) if state.step_times else None
    allowed, high, regular = _rhythm(state, config)
    if state.phase is not None and state.phase_since is not None:
        # A slow phase never shortens what the job's own rhythm allows (a 20-minute step is not a hang).
        phase, since = state.phase, state.phase_since
        threshold = max(config.phase_window(phase), allowed)
    elif state.first_step_at is None:
        phase, since = Phase.STARTUP, state.last_progress_at or state.started_at
        threshold = max(config.startup_grace_s, allowed)
    else:
        phase, since, threshold = Phase.TRAINING, state.last_progress_at or state.started_at, allowed
    if state.launcher and threshold < config.launcher_s:
        threshold = config.launcher_s
        regular = False
    silent = max(0.0, (now - since).total_seconds())
    hung = silent > threshold
    if high is None:
        basis = "no rhythm learned yet"
    else:
        basis = (f"{'regular' if regular else 'no regular'} rhythm: p99 {high:.1f} s between progress lines "
                 f"over the last {len(state.intervals)}")
    if state.launcher:
        basis += "; the job's launcher restarts hung ranks in-job, so it answers first"
    where = f"after step {state.last_step}" if state.last_step is not None else "before the first step"
    explanation = (f"{'no progress' if hung else 'progressing'}: silent for {silent:.0f} s {where} "
                   f"during {phase} (threshold {threshold:.0f} s; {basis})")
    return HangAssessment(hung=hung, phase=phase, silent_for_s=silent, threshold_s=threshold,
                          step_time_s=step_time, interval_p99_s=high, rhythm=regular, last_step=state.last_step,
                          explanation=explanation)


def hang_anomaly(assessment: HangAssessment, *, anomaly_id: str, job_id: str, observed_at: datetime,
                 detected_at: datetime, cluster: str = "default", job_attempt: int = 0) -> Anomaly:
    """The anomaly for a hung job; no node is named, since silence does not say who is stuck."""
    return Anomaly(id=anomaly_id, source=AnomalySource.LOG, kind=AnomalyKind.HANG, cluster=cluster,
                   job_id=job_id, job_attempt=job_attempt, evidence=[assessment.explanation],
                   category=Category.HANG, observed_at=observed_at, detected_at=detected_at)
