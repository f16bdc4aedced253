"""Hang detection relative to the job's own step time, phase-aware."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from goodput.detect import HangConfig, Phase, ProgressEvent, ProgressKind, ProgressState, assess_hang, hang_anomaly
from goodput.models import AnomalyKind, Category

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
CFG = HangConfig(k=10.0, floor_s=60.0, checkpoint_s=2000.0, startup_grace_s=900.0)


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def step(n: int, step_time: float | None = None) -> ProgressEvent:
    return ProgressEvent(kind=ProgressKind.STEP, step=n, step_time_s=step_time)


def trained(steps: int = 10, every: float = 20.0) -> ProgressState:
    state = ProgressState(started_at=T0)
    for i in range(1, steps + 1):
        state = state.observe(step(i), s(i * every), CFG)
    return state


def test_step_time_is_learned_from_timestamps() -> None:
    state = trained()
    assert state.last_step == 10
    assert set(state.step_times) == {20.0}


def test_threshold_scales_with_the_jobs_own_step_time() -> None:
    state = trained()  # 20 s/step: threshold 200 s
    assert not assess_hang(state, s(200 + 199), CFG).hung
    verdict = assess_hang(state, s(200 + 201), CFG)
    assert verdict.hung and verdict.phase is Phase.TRAINING
    assert verdict.threshold_s == 200.0 and verdict.step_time_s == 20.0
    assert "after step 10" in verdict.explanation


def test_floor_applies_to_fast_steps() -> None:
    state = trained(every=1.0)  # 10 x 1 s = 10 s, below the 60 s floor
    assert not assess_hang(state, s(10 + 59), CFG).hung
    assert assess_hang(state, s(10 + 61), CFG).hung


def test_checkpoint_save_has_its_own_window() -> None:
    state = trained().observe(ProgressEvent(kind=ProgressKind.CHECKPOINT_START), s(205), CFG)
    assert not assess_hang(state, s(205 + 1999), CFG).hung
    late = assess_hang(state, s(205 + 2001), CFG)
    assert late.hung and late.phase is Phase.CHECKPOINT and late.threshold_s == 2000.0
    done = state.observe(ProgressEvent(kind=ProgressKind.CHECKPOINT_END), s(400), CFG)
    assert assess_hang(done, s(400 + 201), CFG).hung  # back to the normal threshold


def test_first_step_after_a_checkpoint_ends_the_checkpoint_phase() -> None:
    state = trained().observe(ProgressEvent(kind=ProgressKind.CHECKPOINT_START), s(205), CFG)
    state = state.observe(step(11), s(300), CFG)
    assert state.checkpoint_since is None
    assert assess_hang(state, s(300 + 201), CFG).phase is Phase.TRAINING


def test_startup_grace_before_the_first_step() -> None:
    state = ProgressState(started_at=T0)
    first = assess_hang(state, s(899), CFG)
    assert not first.hung and first.phase is Phase.STARTUP
    assert assess_hang(state, s(901), CFG).hung


def test_echoed_or_stale_steps_are_not_progress() -> None:
    state = trained()
    again = state.observe(step(10), s(390), CFG)  # another rank printing the same iteration late
    assert again == state
    assert assess_hang(again, s(401), CFG).hung


def test_reported_step_time_is_preferred() -> None:
    state = ProgressState(started_at=T0)
    for i in range(1, 4):
        state = state.observe(step(i, step_time=1.5), s(i * 100), CFG)
    assert state.step_times == (1.5, 1.5, 1.5)


def test_window_keeps_only_recent_steps() -> None:
    state = trained(steps=50, every=5.0)
    assert len(state.step_times) == CFG.window


def test_progress_bar_epochs_restart_their_count() -> None:
    state = ProgressState(started_at=T0)
    state = state.observe(ProgressEvent(kind=ProgressKind.STEP, step=999, epoch=0), s(10), CFG)
    state = state.observe(ProgressEvent(kind=ProgressKind.STEP, step=1, epoch=1), s(20), CFG)
    assert state.last_marker == (1, 1) and state.last_progress_at == s(20)


def test_hang_anomaly() -> None:
    verdict = assess_hang(trained(), s(1000), CFG)
    a = hang_anomaly(verdict, anomaly_id="hang-1", job_id="42", observed_at=s(1000), detected_at=s(1000))
    assert (a.kind, a.category, a.nodes) == (AnomalyKind.HANG, Category.HANG, ())
    assert a.evidence == [verdict.explanation]
