"""Phases of a training job that are slow by nature, recognised from what the frameworks print.

A hang threshold learned from the job's step rhythm (goodput.detect.hang) is seconds long for a
1-second step; a checkpoint save, an evaluation pass or a data-loader build takes minutes and
prints no step meanwhile. Each such phase gets its own bounded window instead: it opens on the
line that starts it and closes on its end line or the next step. This module is that knowledge
as data, one row per printed message, with the framework that prints it, an example line as
its source prints it, and the RE2 pattern (linear time over job output) that recognises it, so a
reviewer can check each row against the framework and a site can add its own.

Checkpoint saves are recognised by `goodput.detect.progress.DEFAULT_PATTERNS` (configurable as
before); rows here add the phases that had none. Jobs that want to say it themselves (a job
using NVRx sections can do it where it opens and closes one) print `goodput:phase <name> start`
and `goodput:phase <name> end`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import field_validator

from goodput.models import Frozen
from goodput.untrusted_text import LinearPatternError, LinearRegex


class Phase(StrEnum):
    """Where a job attempt is, as far as its output says."""

    STARTUP = "startup"  # before the first step: rendezvous, model build, checkpoint load
    TRAINING = "training"
    CHECKPOINT = "checkpoint"  # a checkpoint save
    CHECKPOINT_LOAD = "checkpoint-load"
    EVALUATION = "evaluation"
    DATA_WARMUP = "data-warmup"  # building datasets, index files, data-loader workers


SLOW_PHASES = (Phase.CHECKPOINT, Phase.CHECKPOINT_LOAD, Phase.EVALUATION, Phase.DATA_WARMUP)


class Edge(StrEnum):
    START = "start"
    END = "end"


class PhaseMarker(Frozen):
    """One printed message that opens or closes a slow phase."""

    framework: str
    example: str  # a line as the framework prints it (its source or documentation); tests parse each
    phase: Phase
    edge: Edge
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _linear(cls, value: str) -> str:
        try:
            LinearRegex(value)
        except LinearPatternError as exc:
            raise ValueError(f"phase pattern {value!r} does not compile: {exc}") from exc
        return value

    @field_validator("phase")
    @classmethod
    def _slow(cls, value: Phase) -> Phase:
        if value not in SLOW_PHASES:
            raise ValueError(f"{value} is not a slow phase: it has no window of its own")
        return value


def _m(framework: str, example: str, phase: Phase, edge: Edge, pattern: str) -> PhaseMarker:
    return PhaseMarker(framework=framework, example=example, phase=phase, edge=edge, pattern=pattern)


_S, _E = Edge.START, Edge.END

PHASE_MARKERS: tuple[PhaseMarker, ...] = (
    # Checkpoint loads (megatron/training/checkpointing.py, lightning's _CheckpointConnector,
    # torchtitan's CheckpointManager, transformers' Trainer).
    _m("Megatron-LM", " loading checkpoint from /ckpt/gpt3 at iteration 5000", Phase.CHECKPOINT_LOAD, _S,
       r"\bloading checkpoint from \S+ at iteration \d+"),
    _m("Megatron-LM", "  successfully loaded checkpoint from /ckpt/gpt3 [ t 1/8, p 1/4 ] at iteration 5000",
       Phase.CHECKPOINT_LOAD, _E, r"\bsuccessfully loaded checkpoint from "),
    _m("Lightning / NeMo", "Restoring states from the checkpoint path at /ckpt/last.ckpt", Phase.CHECKPOINT_LOAD, _S,
       r"\bRestoring states from the checkpoint path at "),
    _m("Lightning / NeMo", "Restored all states from the checkpoint at /ckpt/last.ckpt", Phase.CHECKPOINT_LOAD, _E,
       r"\bRestored all states from the checkpoint at "),
    _m("torchtitan (PyTorch DCP)", "Loading the checkpoint from ./outputs/checkpoint/step-1000.",
       Phase.CHECKPOINT_LOAD, _S,
       r"\bLoading the checkpoint (?:from|at) "),
    _m("torchtitan (PyTorch DCP)", "Finished loading the checkpoint in 41.27 seconds.",
       Phase.CHECKPOINT_LOAD, _E, r"\bFinished loading the checkpoint in "),
    _m("HF Transformers Trainer", "Loading model from out/checkpoint-800.", Phase.CHECKPOINT_LOAD, _S,
       r"\bLoading model from \S+\.\s*$"),
    # Checkpoint saves with no end line in progress.DEFAULT_PATTERNS.
    _m("NeMo", "Async checkpoint save for step 1200 (/ckpt/step=1200.ckpt) finalized successfully.",
       Phase.CHECKPOINT, _E,
       r"\bAsync checkpoint save for step \d+ .*finalized successfully"),
    # Evaluation passes (megatron/training/training.py evaluate(); transformers' Trainer.evaluate;
    # Lightning's validation and sanity-check progress bars).
    _m("Megatron-LM", "Evaluating iter 1/100", Phase.EVALUATION, _S, r"\bEvaluating iter \d+/\d+"),
    _m("Megatron-LM", " validation loss at iteration 2000 | lm loss value: 2.412E+00 | lm loss PPL: 1.116E+01 | ",
       Phase.EVALUATION, _E,
       r"\bvalidation loss at (?:iteration \d+|the end of training)"),
    _m("HF Transformers Trainer", "***** Running Evaluation *****", Phase.EVALUATION, _S,
       r"\*\*\*\*\* Running Evaluation \*\*\*\*\*"),
    _m("HF Transformers Trainer", "{'eval_loss': 0.4125, 'eval_runtime': 121.3, 'epoch': 1.0}",
       Phase.EVALUATION, _E,
       r"^\{'eval_[a-z_]+': "),
    _m("Lightning / NeMo", "Validation DataLoader 0:  40%|████      | 20/50 [00:41<01:02,  0.48it/s]",
       Phase.EVALUATION, _S,
       r"^\s*(?:Validation|Sanity Checking)(?: DataLoader \d+)?: "),
    # Data-loader warm-up (megatron/training/training.py build_train_valid_test_data_iterators).
    _m("Megatron-LM", "> building train, validation, and test datasets ...", Phase.DATA_WARMUP, _S,
       r"^> building train, validation, and test datasets"),
    _m("Megatron-LM", "> finished creating GPT datasets ...", Phase.DATA_WARMUP, _E,
       r"^> finished creating \S+ datasets"),
    _m("Megatron-LM", "[after dataloaders are built] datetime: 2026-12-03 09:14:07 ", Phase.DATA_WARMUP, _E,
       r"\[after dataloaders are built\]"),
    # The job saying it itself, e.g. from an NVRx section's start and end.
    *(_m("goodput", f"goodput:phase {phase} {edge}", phase, edge, rf"\bgoodput:phase {phase} {edge}\b")
      for phase in SLOW_PHASES for edge in Edge),
)
