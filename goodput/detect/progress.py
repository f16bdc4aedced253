"""Training progress from log lines: which step a job is at, how long a step takes, and whether
a checkpoint save is under way.

Every framework prints progress differently; the defaults cover Megatron-LM, NeMo/Lightning and
Hugging Face progress bars, the HF Trainer's metric dicts, torchtitan and DeepSpeed. Sites with
their own format pass their own regexes (named groups: `step`, optionally `total`, `epoch`,
`step_ms` or `step_s`). The patterns are configuration, validated when the parser is built; they
run on RE2 (linear time over job output), so one that needs backtracking is refused there.
Numbers are bounded before conversion: a line claiming step 10**5000 is not progress.
"""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import Field, field_validator

from goodput.detect.phases import PHASE_MARKERS, Edge, Phase, PhaseMarker
from goodput.diagnose.signatures.prefixes import split_prefix_bytes
from goodput.models import Frozen
from goodput.untrusted_text import LinearPatternError, LinearRegex, bounded_int, utf8

MAX_LINE = 4096  # progress lines are short; never run a regex over a megabyte of junk
MAX_STEP_DIGITS = 12  # a trillion steps
MAX_EPOCH_DIGITS = 9
MAX_STEP_TIME_S = 1e6  # eleven days for one step is not a step time any more


class ProgressKind(StrEnum):
    STEP = "step"
    CHECKPOINT_START = "checkpoint-start"
    CHECKPOINT_END = "checkpoint-end"
    PHASE_START = "phase-start"  # a slow phase (goodput.detect.phases) opens; `phase` says which
    PHASE_END = "phase-end"


class ProgressEvent(Frozen):
    kind: ProgressKind
    step: int | None = None
    total: int | None = None
    epoch: int | None = None
    step_time_s: float | None = Field(default=None, ge=0.0)
    rank: int | None = None
    host: str | None = None
    phase: Phase | None = None

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
                LinearRegex(pattern)
            except LinearPatternError as exc:
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

    def __init__(self, patterns: ProgressPatterns = DEFAULT_PATTERNS,
                 phases: tuple[PhaseMarker, ...] = PHASE_MARKERS) -> None:
        self.patterns = patterns
        # Checkpoint and phase lines first: "saving checkpoint at iteration 5000" must not read as step 5000.
        self._rules: tuple[tuple[ProgressKind, Phase | None, LinearRegex], ...] = (
            *((ProgressKind.CHECKPOINT_END, None, LinearRegex(p)) for p in patterns.checkpoint_end),
            *((ProgressKind.CHECKPOINT_START, None, LinearRegex(p)) for p in patterns.checkpoint_start),
            *((_EDGE_KIND[m.edge], m.phase, LinearRegex(m.pattern)) for m in phases),
            *((ProgressKind.STEP, None, LinearRegex(p)) for p in patterns.step),
        )
        # Almost no line opens or closes a phase: one pass over all phase patterns says whether any
        # row needs trying, so the table costs one search per line, however many rows it has.
        self._phase_gate = LinearRegex("|".join(f"(?:{m.pattern})" for m in phases)) if phases else None

    def parse(self, line: str) -> ProgressEvent | None:
        data = utf8(line[:MAX_LINE])
        context, offset = split_prefix_bytes(data)
        body = data[offset:] if offset else data
        gate: bool | None = None
        for kind, phase, regex in self._rules:
            if phase is not None:
                if gate is None:
                    gate = self._phase_gate is not None and self._phase_gate.search(body) is not None
                if not gate:
                    continue
            m = regex.search(body)
            if m is None:
                continue
            g = m.groupdict()
            numbers = {name: bounded_int(g.get(name), max_digits=digits) for name, digits in _NUMBERS}
            if any(numbers[name] is None for name, _ in _NUMBERS if name in g):
                continue  # an absurd number: not this rule's progress line
            return ProgressEvent(
                kind=kind, step=numbers["step"], total=numbers["total"], epoch=numbers["epoch"],
                step_time_s=_step_time(g), phase=phase,
                rank=context.rank if context.rank is not None else context.task, host=context.host)
        return None


_EDGE_KIND = {Edge.START: ProgressKind.PHASE_START, Edge.END: ProgressKind.PHASE_END}
_NUMBERS = (("step", MAX_STEP_DIGITS), ("total", MAX_STEP_DIGITS), ("epoch", MAX_EPOCH_DIGITS))


def _step_time(groups: dict[str, str]) -> float | None:
    """Seconds per step from `step_ms` or `step_s`; None when absent or not a plausible time."""
    try:
        if "step_ms" in groups:
            seconds = float(groups["step_ms"]) / 1000.0
        elif "step_s" in groups:
            seconds = float(groups["step_s"])
        else:
            return None
    except ValueError:  # a site pattern may capture something that is not a number
        return None
    return seconds if math.isfinite(seconds) and 0.0 <= seconds <= MAX_STEP_TIME_S else None
