"""The values checkpoint discovery produces and resume decisions carry.

Frozen pydantic models like the rest of goodput's vocabulary, because a resume choice travels in
Temporal payloads and incident reports; they grow by adding defaulted fields only.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from goodput.models import Frozen

DEFAULT_SETTLE_S = 120.0
DEFAULT_MAX_CANDIDATES = 10


class Checkpoint(Frozen):
    """One checkpoint as discovery found it: where, which step, and whether it looks whole.

    `complete` is False when any problem was found; `problems` says why in words a person can act
    on. `mtime` is the newest mtime among the entries looked at (None when nothing was there), so
    the resume choice can tell a checkpoint still being written from a settled one.
    """

    path: str
    step: int = Field(ge=0)
    layout: str
    tag: str = ""
    files_checked: int = Field(default=0, ge=0)
    total_bytes: int = Field(default=0, ge=0)
    mtime: datetime | None = None
    complete: bool
    problems: tuple[str, ...] = ()
    # True when the layout's own "latest" pointer (Megatron tracker, DeepSpeed `latest`) names it.
    pointer: bool = False


class CheckpointConfig(Frozen):
    """Where a job's checkpoints live and how they are laid out (None: auto-detect)."""

    layout: str | None = None
    root: str = Field(min_length=1)
    # generic layout only: entries of `root` matching `pattern`, step from `step_regex`'s first
    # group, complete when `marker` exists inside the directory (or next to a file checkpoint).
    pattern: str = "ckpt_*"
    step_regex: str = r"(\d+)"
    marker: str | None = ".complete"
    # Only the newest candidates are validated: an old run can hold hundreds of checkpoints.
    max_candidates: int = Field(default=DEFAULT_MAX_CANDIDATES, ge=1, le=1000)
    settle_s: float = Field(default=DEFAULT_SETTLE_S, ge=0.0)


class Discovery(Frozen):
    """What discovery under one root found: the layout used, its checkpoints, newest first."""

    root: str
    layout: str | None
    checkpoints: tuple[Checkpoint, ...] = ()
    problems: tuple[str, ...] = ()


class SkippedCheckpoint(Frozen):
    checkpoint: Checkpoint
    reason: str


class ResumeChoice(Frozen):
    """The checkpoint to resume from (None: no valid one), and every newer one passed over."""

    checkpoint: Checkpoint | None
    skipped: tuple[SkippedCheckpoint, ...] = ()
    explanation: str
    # When a newer checkpoint was skipped only because it has not settled: after this many
    # seconds it would be trusted, so a caller that can afford to wait may look again.
    recheck_after_s: float | None = None


class LostWork(Frozen):
    """Training work redone after a failure: iterations, wall seconds and GPU-hours."""

    iterations: int = Field(default=0, ge=0)
    seconds: float = Field(default=0.0, ge=0.0)
    gpu_hours: float = Field(default=0.0, ge=0.0)

    def __add__(self, other: LostWork) -> LostWork:
        return LostWork(iterations=self.iterations + other.iterations, seconds=self.seconds + other.seconds,
                        gpu_hours=self.gpu_hours + other.gpu_hours)
