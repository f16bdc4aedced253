"""Hang detection: no progress for much longer than this job's own steps take.

A fixed timeout is wrong for every job: 10 minutes is forever for 1-second steps and normal for
a 15-minute evaluation. The threshold here is max(k x the job's recent median step time, floor),
multiplied while a checkpoint save is in progress (saves legitimately take many step times), and
a generous grace before the first step (data loading, compilation). The state is an immutable
value folded over progress events, so a workflow can carry it and replay it.
"""

from __future__ import annotations

import statistics
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from goodput.detect.progress import ProgressEvent, ProgressKind
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen


class HangConfig(Frozen):
    k: float = Field(default=10.0, gt=0.0)
    floor_s: float = Field(default=300.0, ge=0.0)
    checkpoint_factor: float = Field(default=10.0, ge=1.0)
    startup_grace_s: float = Field(default=1800.0, ge=0.0)
    window: int = Field(default=20, ge=1, le=1000)


DEFAULT_HANG_CONFIG = HangConfig()


class Phase(StrEnum):
    STARTUP = "startup"
    TRAINING = "training"
    CHECKPOINT = "checkpoint"


class ProgressState(Frozen):
    """What is known about one job attempt's progress; fold events in with `observe`."""

    started_at: datetime
    last_progress_at: datetime | None = None
    last_marker: tuple[int, int] | None = None
    last_step: int | None = None
    step_times: tuple[float, ...] = ()
    checkpoint_since: datetime | None = None

    def restarted(self, at: datetime) -> ProgressState:
        """The job's launcher restarted its workers in-job at `at`: they start up again and replay
        the steps since their checkpoint, so the step count starts over (the step times stay)."""
        return ProgressState(started_at=at, step_times=self.step_times)

    def observe(self, event: ProgressEvent, at: datetime,
                config: HangConfig = DEFAULT_HANG_CONFIG) -> ProgressState:
        if event.kind is ProgressKind.CHECKPOINT_START:
            return self.model_copy(update={"checkpoint_since": self.checkpoint_since or at})
        if event.kind is ProgressKind.CHECKPOINT_END:
            return self.model_copy(update={"checkpoint_since": None, "last_progress_at": at})
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
        return self.model_copy(update={
            "last_progress_at": at, "last_marker": marker or self.last_marker,
            "last_step": event.step if event.step is not None else self.last_step,
            "step_times": tuple(times[-config.window:]), "checkpoint_since": None})


class HangAssessment(Frozen):
    hung: bool
    phase: Phase
    silent_for_s: float
    threshold_s: float
    step_time_s: float | None = None
    last_step: int | None = None
    explanation: str


def assess_hang(state: ProgressState, now: datetime,
                config: HangConfig = DEFAULT_HANG_CONFIG) -> HangAssessment:
    step_time = statistics.median(state.step_times) if state.step_times else None
    if state.last_progress_at is None and state.checkpoint_since is None:
        phase = Phase.STARTUP
        since = state.started_at
        threshold = max(config.startup_grace_s, config.floor_s)
    else:
        base = max(config.k * step_time, config.floor_s) if step_time is not None else max(
            config.startup_grace_s, config.floor_s)
        marks = [t for t in (state.last_progress_at, state.checkpoint_since) if t is not None]
        since = max(marks)
        if state.checkpoint_since is not None:
            phase, threshold = Phase.CHECKPOINT, base * config.checkpoint_factor
        else:
            phase, threshold = Phase.TRAINING, base
    silent = max(0.0, (now - since).total_seconds())
    hung = silent > threshold
    step_txt = f"{step_time:.1f} s/step recently" if step_time is not None else "no step time known yet"
    where = f"after step {state.last_step}" if state.last_step is not None else "before the first step"
    explanation = (f"{'no progress' if hung else 'progressing'}: silent for {silent:.0f} s {where} "
                   f"during {phase} (threshold {threshold:.0f} s; {step_txt})")
    return HangAssessment(hung=hung, phase=phase, silent_for_s=silent, threshold_s=threshold,
                          step_time_s=step_time, last_step=state.last_step, explanation=explanation)


def hang_anomaly(assessment: HangAssessment, *, anomaly_id: str, job_id: str, observed_at: datetime,
                 detected_at: datetime, cluster: str = "default", job_attempt: int = 0) -> Anomaly:
    """The anomaly for a hung job; no node is named, since silence does not say who is stuck."""
    return Anomaly(id=anomaly_id, source=AnomalySource.LOG, kind=AnomalyKind.HANG, cluster=cluster,
                   job_id=job_id, job_attempt=job_attempt, evidence=[assessment.explanation],
                   category=Category.HANG, observed_at=observed_at, detected_at=detected_at)
