"""Hangs in seconds from the job's own rhythm, with no false alarm on phases slow by nature.

Every scenario runs the shipped defaults over lines as the frameworks print them (parsed by the
live detector's parser), checking the verdict second by second where a false alarm could hide.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pytest

from goodput.detect.hang import DEFAULT_HANG_CONFIG, HangConfig, Phase, ProgressState, assess_hang
from goodput.detect.phases import PHASE_MARKERS, Edge
from goodput.detect.progress import ProgressKind, ProgressParser

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
PARSER = ProgressParser()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Job:
    """One job attempt's output, fed line by line at given times through the parser."""

    def __init__(self, config: HangConfig = DEFAULT_HANG_CONFIG) -> None:
        self.config = config
        self.state = ProgressState(started_at=T0)
        self.now = 0.0
        self.step = 0

    def line(self, text: str, when: float) -> None:
        self.now = when
        event = PARSER.parse(text)
        if event is not None:
            self.state = self.state.observe(event, at(when), self.config)

    def steps(self, n: int, every: float, fmt: str = "megatron") -> None:
        for _ in range(n):
            self.step += 1
            text = {"megatron": f" iteration {self.step:8d}/  500000 | consumed samples: 1 | "
                                f"elapsed time per iteration (ms): {every * 1000:.1f} |",
                    "hf": f" 41%|████      | {self.step}/20000 [41:02<59:03,  {every:.2f}s/it]",
                    "lightning": f"Epoch 0:  12%|█▏   | {self.step}/10000 [22:17<2:42:51, 1.00it/s, v_num=1]"}[fmt]
            self.line(text, self.now + every)

    def quiet_until(self, when: float, every: float = 1.0) -> Iterable[float]:
        """Each moment to check while the job prints nothing until `when`."""
        start = self.now
        t = start
        while t < when:
            t = min(when, t + every)
            yield t
        self.now = when

    def hung(self, when: float) -> bool:
        return assess_hang(self.state, at(when), self.config).hung


def test_a_1s_step_job_that_stops_is_hung_within_a_minute() -> None:
    job = Job()
    job.line("> building train, validation, and test datasets ...", 20)
    job.line("> finished creating GPT datasets ...", 30)
    job.steps(30, every=1.0)
    stopped = job.now
    verdict = assess_hang(job.state, at(stopped + 60), job.config)
    assert verdict.hung and verdict.phase is Phase.TRAINING and verdict.rhythm
    assert verdict.threshold_s <= 60
    assert not job.hung(stopped + 30)  # the floor: a GC pause or a flush is not a hang


@pytest.mark.parametrize("fmt", ["megatron", "hf", "lightning"])
def test_a_four_minute_start_up_raises_nothing(fmt: str) -> None:
    job = Job()
    job.line(" loading checkpoint from /ckpt/gpt3 at iteration 5000", 15)
    assert all(not job.hung(t) for t in job.quiet_until(200))
    job.line("  successfully loaded checkpoint from /ckpt/gpt3 [ t 1/8, p 1/4 ] at iteration 5000", 200)
    assert all(not job.hung(t) for t in job.quiet_until(240))
    assert assess_hang(job.state, at(239), job.config).phase is Phase.STARTUP
    job.steps(30, every=1.0, fmt=fmt)
    assert all(not job.hung(t) for t in job.quiet_until(job.now + 40))


CHECKPOINT_SAVES = [
    ("saving checkpoint at iteration    5030 to /ckpt in torch_dist format",
     "  successfully saved checkpoint from iteration    5030 to /ckpt [ t 1/8, p 1/4 ]"),
    ("[Torch] Checkpoint global_step5030 is about to be saved!", "[Torch] Checkpoint global_step5030 is ready now!"),
    ("Saving the checkpoint (or staging if async is enabled).",
     "Finished saving the checkpoint (or staging if async is enabled)in 180.02 seconds."),
    ("Scheduled async checkpoint save for /ckpt/step=5030.ckpt",
     "Async checkpoint save for step 5030 (/ckpt/step=5030.ckpt) finalized successfully."),
    ("Saving model checkpoint to out/checkpoint-5030", None),  # HF: the next step ends it
]


@pytest.mark.parametrize(("start", "end"), CHECKPOINT_SAVES)
def test_a_three_minute_checkpoint_save_raises_nothing(start: str, end: str | None) -> None:
    job = Job()
    job.steps(30, every=1.0)
    job.line(start, job.now + 0.5)
    saving = job.now
    assert all(not job.hung(t) for t in job.quiet_until(saving + 180))
    assert assess_hang(job.state, at(saving + 179), job.config).phase is Phase.CHECKPOINT
    if end is not None:
        job.line(end, job.now)
    job.steps(30, every=1.0)
    assert all(not job.hung(t) for t in job.quiet_until(job.now + 40))
    assert job.hung(job.now + 61)  # the save did not spoil the rhythm


EVALUATIONS = [
    ("megatron", ["Evaluating iter 1/100", "Evaluating iter 2/100"],
     " validation loss at iteration 5030 | lm loss value: 2.412E+00 | lm loss PPL: 1.116E+01 | "),
    ("hf", ["***** Running Evaluation *****", "  Num examples = 5000"],
     "{'eval_loss': 0.4125, 'eval_runtime': 121.3, 'eval_samples_per_second': 41.2, 'epoch': 1.0}"),
    ("lightning", ["Validation DataLoader 0:   0%|          | 0/50 [00:00<?, ?it/s]"], None),
]


@pytest.mark.parametrize(("fmt", "starts", "end"), EVALUATIONS)
def test_a_two_minute_evaluation_raises_nothing(fmt: str, starts: list[str], end: str | None) -> None:
    job = Job()
    job.steps(30, every=1.0, fmt=fmt)
    for i, line in enumerate(starts):
        job.line(line, job.now + 0.5 + i)
    evaluating = job.now
    assert all(not job.hung(t) for t in job.quiet_until(evaluating + 120))
    assert assess_hang(job.state, at(evaluating + 119), job.config).phase is Phase.EVALUATION
    if end is not None:
        job.line(end, job.now)
    job.steps(10, every=1.0, fmt=fmt)
    assert all(not job.hung(t) for t in job.quiet_until(job.now + 40))


@pytest.mark.parametrize(("phase", "start"), [
    (Phase.EVALUATION, "Evaluating iter 1/100"),
    (Phase.CHECKPOINT, "saving checkpoint at iteration    5030 to /ckpt in torch_dist format"),
    (Phase.DATA_WARMUP, "goodput:phase data-warmup start"),
])
def test_a_hang_inside_a_slow_phase_is_caught_when_its_window_ends(phase: Phase, start: str) -> None:
    job = Job()
    job.steps(30, every=1.0)
    job.line(start, job.now + 1)
    opened = job.now
    window = DEFAULT_HANG_CONFIG.phase_window(phase)
    assert not job.hung(opened + window - 1)
    verdict = assess_hang(job.state, at(opened + window + 1), job.config)
    assert verdict.hung and verdict.phase is phase
    assert f"during {phase}" in verdict.explanation


def test_a_hang_during_start_up_is_caught_when_the_start_up_window_ends() -> None:
    job = Job()
    assert not job.hung(DEFAULT_HANG_CONFIG.startup_grace_s - 1)
    assert job.hung(DEFAULT_HANG_CONFIG.startup_grace_s + 1)


def test_a_job_with_irregular_steps_keeps_a_conservative_window() -> None:
    job = Job()
    for _ in range(8):  # 1 s steps with unannounced 15 s pauses: the rhythm says little
        job.steps(5, every=1.0)
        job.steps(1, every=15.0)
    verdict = assess_hang(job.state, at(job.now + 200), job.config)
    assert not verdict.hung and not verdict.rhythm
    assert verdict.threshold_s >= DEFAULT_HANG_CONFIG.unlearned_s


def test_too_few_intervals_keep_a_conservative_window() -> None:
    job = Job()
    job.steps(3, every=1.0)
    assert not job.hung(job.now + DEFAULT_HANG_CONFIG.unlearned_s - 1)
    assert job.hung(job.now + DEFAULT_HANG_CONFIG.unlearned_s + 1)


def test_a_requeued_attempts_slow_first_steps_are_not_a_second_hang() -> None:
    """The Slurm e2e test's settings (k=5, floor 15 s): a loaded machine once made the requeued
    attempt's early steps 20-40 s apart after two quick ones, and that was taken for a hang."""
    job = Job(HangConfig(k=5, floor_s=15, startup_grace_s=120, unlearned_s=60))
    job.steps(3, every=0.3)
    assert all(not job.hung(t) for t in job.quiet_until(job.now + 40))
    job.steps(3, every=40.0)
    job.steps(10, every=0.3)
    assert job.hung(job.now + 5 * max(job.state.intervals) + 1)  # the slow steps stay in the rhythm


def test_the_rhythm_is_between_progress_lines_not_per_step() -> None:
    # Megatron with log_interval 100 at 0.5 s/iteration prints a line every 50 s.
    job = Job()
    for i in range(1, 13):
        job.line(f" iteration {i * 100:8d}/  500000 | elapsed time per iteration (ms): 500.0 |", i * 50.0)
    assert job.state.step_times[-1] == 0.5
    assert all(not job.hung(t) for t in job.quiet_until(job.now + 120))
    assert job.hung(job.now + 10 * 50 + 1)


def test_lines_read_in_one_batch_are_one_interval() -> None:
    job = Job()
    for i in range(20):  # a 0.2 s-step job polled every 0.4 s: two lines per read
        job.line(f" iteration {2 * i + 1}/ 100 |", i * 0.4)
        job.line(f" iteration {2 * i + 2}/ 100 |", i * 0.4)
    assert len(job.state.intervals) == 19 and all(i == pytest.approx(0.4) for i in job.state.intervals)


def test_every_phase_row_recognises_its_own_example() -> None:
    for marker in PHASE_MARKERS:
        event = PARSER.parse(marker.example)
        assert event is not None, marker
        kind = ProgressKind.PHASE_START if marker.edge is Edge.START else ProgressKind.PHASE_END
        assert (event.kind, event.phase) == (kind, marker.phase), marker


def test_phase_lines_are_bounded_and_linear() -> None:
    hostile = "Evaluating iter " + "9" * 100_000 + "/" + "a" * 100_000
    assert PARSER.parse(hostile) is None  # past the line bound: not a phase, never a crash
    assert PARSER.parse("goodput:phase training start") is None  # not a slow phase
    with pytest.raises(ValueError, match="does not compile"):
        type(PHASE_MARKERS[0])(framework="x", example="x", phase=Phase.EVALUATION, edge=Edge.START,
                               pattern=r"(a)\1")


def test_a_repeated_start_line_does_not_restart_the_window() -> None:
    job = Job()
    job.steps(30, every=1.0)
    job.line("Evaluating iter 1/100", job.now + 1)
    opened = job.now
    for i in range(2, 100):  # Megatron prints it every eval iteration; a stuck rank's peers may too
        job.line(f"Evaluating iter {i}/100", opened + i * 10)
    assert job.state.phase_since == at(opened)
    assert job.hung(opened + DEFAULT_HANG_CONFIG.evaluation_s + 1)


def test_a_job_whose_launcher_restarts_hung_ranks_is_left_to_it_first() -> None:
    """NVRx's ft_launcher answers a hang in-job after its heartbeat timeout (typically 3-5 min);
    goodput restarting the job from outside first would restart one failure twice."""
    job = Job()
    job.state = ProgressState(started_at=T0, launcher=True)
    job.steps(30, every=1.0)
    assert not job.hung(job.now + 300)
    verdict = assess_hang(job.state, at(job.now + DEFAULT_HANG_CONFIG.launcher_s + 1), job.config)
    assert verdict.hung and "launcher" in verdict.explanation
    plain = Job()
    plain.steps(30, every=1.0)
    plain.state = plain.state.restarted(at(plain.now))  # an in-job restart shows a launcher is there
    plain.steps(30, every=1.0)
    assert plain.state.launcher and not plain.hung(plain.now + 300)
