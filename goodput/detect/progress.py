"""Training progress from log lines: which step a job is at, how long a step takes, and whether
a checkpoint save is under way.

Every framework prints progress differently; the defaults cover Megatron-LM, NeMo/Lightning and
Hugging Face progress bars, the HF Trainer's metric dicts, torchtitan and DeepSpeed. Sites with
their own format pass their own regexes (named groups: `step`, optionally `total`, `epoch`,
`step_ms` or `step_s`). The patterns are configuration, validated when the parser is built.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import Field, field_validator

from goodput.models import Frozen
from goodput.signatures.prefixes import split_prefix

MAX_LINE = 4096  # progress lines are short; never run a regex over a megabyte of junk


class ProgressKind(StrEnum):
    STEP = "step"
    CHECKPOINT_START = "checkpoint-start"
    CHECKPOINT_END = "checkpoint-end"


class ProgressEvent(Frozen):
    kind: ProgressKind
    step: int | None = None
    total: int | None = None
    epoch: int | None = None
    step_time_s: float | None = Field(default=None, ge=0.0)
    rank: int | None = None
    host: str | None = None

    @property
    def marker(self) -> tuple[int, int] | None:
        """Orders progress across epochs (progress bars restart their count each epoch)."""
        return None if self.step is None else (self.epoch or 0, self.step)


class ProgressPatterns(Frozen):
    step: tuple[str, ...]
    checkpoint_start: tuple[str, ...]
    checkpoint_end: tuple[str, ...]

    @field_validator("step", "checkpoint_start", "checkpoint_end")
    @classmethod
    def _compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"progress pattern {pattern!r} does not compile: {exc}") from exc
        return value


DEFAULT_PATTERNS = ProgressPatterns(
    step=(
        # Megatron-LM: " iteration     1200/  250000 | ... | elapsed time per iteration (ms): 1841.2 |"
        r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|"
        r"(?:.*?elapsed time per iteration \(ms\):\s*(?P<step_ms>\d+(?:\.\d+)?))?",
        # torchtitan: "step:  3100  loss:  3.1182 ..."
        r"\bstep:\s*(?P<step>\d+)\s+loss:",
        # DeepSpeed: "steps: 400 loss: 2.9041 iter time (s): 0.912" and "[Rank 0] step=400, skipped=0"
        r"\bsteps: (?P<step>\d+) loss: \S+ iter time \(s\): (?P<step_s>\d+(?:\.\d+)?)",
        r"\bstep=(?P<step>\d+), skipped=\d+",
        # NeMo / Lightning progress bar: "Epoch 3:  12%|█▏   | 1204/10000 [22:17<2:42:51, ...]"
        r"\bEpoch (?P<epoch>\d+):\s+\d+%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+) \[",
        # NeMo / Lightning logged metrics: "global_step=1200" / "global_step: 1200"
        r"\bglobal_step[=:]\s*(?P<step>\d+)",
        # Hugging Face Trainer progress bar: " 41%|████      | 820/2000 [41:02<59:03,  3.00s/it]"
        r"^\s*\d+%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+) \[[\d:]+<",
        # Hugging Face Trainer metric dicts carry no step; any new one is still progress.
        r"^\{'loss': [^,]+,.*'epoch': [\d.]+\}",
    ),
    checkpoint_start=(
        r"\bsaving checkpoint at iteration\s+(?P<step>\d+)",
        r"\[Torch\] Checkpoint \S+ is about to be saved",
        r"\bSaving the checkpoint \(or staging",
        r"\bSaving model checkpoint to \S+",
        r"\bsaving model to '",
        r"\bScheduled async checkpoint save",
    ),
    checkpoint_end=(
        r"\bsuccessfully saved checkpoint (?:from|at) iteration\s+(?P<step>\d+)",
        r"\bCheckpoint \S+ is ready now",
        r"\bFinished saving the checkpoint",
    ),
)


class ProgressParser:
    """Compiled patterns; `parse` returns at most one event per line."""

    def __init__(self, patterns: ProgressPatterns = DEFAULT_PATTERNS) -> None:
        self.patterns = patterns
        # Checkpoint lines first: "saving checkpoint at iteration 5000" must not read as step 5000.
        self._rules: tuple[tuple[ProgressKind, re.Pattern[str]], ...] = (
            *((ProgressKind.CHECKPOINT_END, re.compile(p)) for p in patterns.checkpoint_end),
            *((ProgressKind.CHECKPOINT_START, re.compile(p)) for p in patterns.checkpoint_start),
            *((ProgressKind.STEP, re.compile(p)) for p in patterns.step),
        )

    def parse(self, line: str) -> ProgressEvent | None:
        context, body = split_prefix(line[:MAX_LINE])
        for kind, regex in self._rules:
            m = regex.search(body)
            if m is None:
                continue
            g = {k: v for k, v in m.groupdict().items() if v is not None}
            step_time: float | None = None
            if "step_ms" in g:
                step_time = float(g["step_ms"]) / 1000.0
            elif "step_s" in g:
                step_time = float(g["step_s"])
            return ProgressEvent(
                kind=kind, step=int(g["step"]) if "step" in g else None,
                total=int(g["total"]) if "total" in g else None,
                epoch=int(g["epoch"]) if "epoch" in g else None, step_time_s=step_time,
                rank=context.rank if context.rank is not None else context.task, host=context.host)
        return None
