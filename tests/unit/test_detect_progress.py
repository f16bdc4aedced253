"""Progress extraction from the log formats of common training frameworks."""

from __future__ import annotations

import pytest

from goodput.detect import ProgressEvent, ProgressKind, ProgressParser, ProgressPatterns

P = ProgressParser()


@pytest.mark.parametrize(("line", "step", "total", "epoch", "step_time"), [
    (" 0: [rank0]: iteration     1200/  250000 | consumed samples:       614400 | elapsed time per iteration "
     "(ms): 1841.2 | learning rate: 2.994E-04 |", 1200, 250000, None, 1.8412),
    (" iteration       10/     100 | lm loss: 1.0 |", 10, 100, None, None),
    ("[titan] 2026-11-28 23:59:31,101 - root - INFO - step: 18120  loss:  2.4410  memory: 58.31GiB", 18120,
     None, None, None),
    (" 0: steps: 400 loss: 2.9041 iter time (s): 0.912 samples/sec: 561.4", 400, None, None, 0.912),
    ("[2026-11-29 05:02:11,481] [INFO] [logging.py:128:log_dist] [Rank 0] step=400, skipped=0, lr=[0.00029]", 400,
     None, None, None),
    ("Epoch 3:  12%|█▏        | 1204/10000 [22:17<2:42:51,  1.11s/it, v_num=7, train_loss=0.412]", 1204, 10000,
     3, None),
    ("[NeMo I 2026-11-29 10:00:00 nemo_logging:381] global_step=5000 reduced_train_loss=1.93", 5000, None, None,
     None),
    (" 41%|████      | 820/2000 [41:02<59:03,  3.00s/it]", 820, 2000, None, None),
    ("{'loss': 1.8421, 'grad_norm': 0.77, 'learning_rate': 1.9e-05, 'epoch': 0.41}", None, None, None, None),
])
def test_step_lines(line: str, step: int | None, total: int | None, epoch: int | None,
                    step_time: float | None) -> None:
    ev = P.parse(line)
    assert ev is not None and ev.kind is ProgressKind.STEP
    assert (ev.step, ev.total, ev.epoch) == (step, total, epoch)
    assert ev.step_time_s == (pytest.approx(step_time) if step_time is not None else None)


@pytest.mark.parametrize(("line", "kind"), [
    ("saving checkpoint at iteration    5000 to /lustre/ckpt in torch_dist format", ProgressKind.CHECKPOINT_START),
    ("  successfully saved checkpoint from iteration    5000 to /lustre/ckpt", ProgressKind.CHECKPOINT_END),
    ("[Torch] Checkpoint global_step400 is about to be saved!", ProgressKind.CHECKPOINT_START),
    ("Checkpoint global_step400 is ready now!", ProgressKind.CHECKPOINT_END),
    ("[titan] INFO - Saving the checkpoint (or staging if async is enabled).", ProgressKind.CHECKPOINT_START),
    ("[titan] INFO - Finished saving the checkpoint (or staging if async is enabled)in 31.20 seconds.",
     ProgressKind.CHECKPOINT_END),
    ("Saving model checkpoint to /out/checkpoint-800", ProgressKind.CHECKPOINT_START),
])
def test_checkpoint_lines(line: str, kind: ProgressKind) -> None:
    ev = P.parse(line)
    assert ev is not None and ev.kind is kind


@pytest.mark.parametrize("line", [
    "NCCL INFO Channel 00/0 : 0[3b000] -> 1[5e000] via P2P/IPC",
    "building GPT model ...",
    "x" * 100_000,
])
def test_other_lines_are_not_progress(line: str) -> None:
    assert P.parse(line) is None


def test_rank_and_host_come_from_prefixes() -> None:
    ev = P.parse(" 7: [rank7]: iteration 3/ 9 |")
    assert ev == ProgressEvent(kind=ProgressKind.STEP, step=3, total=9, rank=7)


def test_custom_patterns() -> None:
    parser = ProgressParser(ProgressPatterns(step=(r"MYSTEP (?P<step>\d+) took (?P<step_s>[\d.]+)s",),
                                             checkpoint_start=(), checkpoint_end=()))
    ev = parser.parse("MYSTEP 77 took 2.5s")
    assert ev is not None and (ev.step, ev.step_time_s) == (77, 2.5)
    assert parser.parse(" iteration 3/ 9 |") is None


def test_invalid_custom_pattern_is_rejected() -> None:
    with pytest.raises(ValueError):
        ProgressPatterns(step=("(unclosed",), checkpoint_start=(), checkpoint_end=())


@pytest.mark.parametrize("pattern", [r"step (?P<step>\d+)(?=\s)", r"(\d+) again \1", r"(?<!no )step"])
def test_a_custom_pattern_that_needs_backtracking_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="not a linear-time pattern"):
        ProgressPatterns(step=(pattern,), checkpoint_start=(), checkpoint_end=())


@pytest.mark.parametrize(("line", "step"), [
    (" iteration " + "9" * 4000 + "/  100 | lm loss: 1.0 |", None),
    ("[NeMo I] global_step=" + "9" * 13 + " reduced_train_loss=1.93", None),
    ("[NeMo I] global_step=" + "9" * 12 + " reduced_train_loss=1.93", 10**12 - 1),
    ("Epoch " + "1" * 10 + ":  12%|█▏   | 1204/10000 [22:17<2:42:51]", None),
    ("[titan] step: ٣  loss: 2.4", None),
])
def test_absurd_step_numbers_are_not_progress(line: str, step: int | None) -> None:
    """A 4000-digit step was converted with int() (quadratic, and over 4,300 digits a ValueError)."""
    ev = P.parse(line)
    assert (ev.step if ev else None) == step


@pytest.mark.parametrize("seconds", ["9" * 400, "1000000.5", "2000000"])
def test_absurd_step_times_are_dropped(seconds: str) -> None:
    ev = P.parse(f"steps: 400 loss: 2.9 iter time (s): {seconds} samples/sec: 5")
    assert ev is not None and ev.step == 400 and ev.step_time_s is None
