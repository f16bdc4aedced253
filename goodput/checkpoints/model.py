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
MAX_SETTLE_S = 30 * 24 * 3600.0
# A step number has at most this many digits (int64 holds 18): no framework counts further, and
# a longer digit run in a job-controlled name is refused before int() sees it.
MAX_STEP_DIGITS = 18
MAX_STEP = 10**MAX_STEP_DIGITS - 1
PATH_MAX = 4096


class Checkpoint(Frozen):
    """One checkpoint as discovery found it: where, which step, and whether it looks whole.

    `complete` is False when any problem was found; `problems` says why in words a person can act
    on. `mtime` is the newest mtime among the entries looked at (None when nothing was there), so
    the resume choice can tell a checkpoint still being written from a settled one.
    """

    path: str
    step: int = Field(ge=0, le=MAX_STEP)
    layout: str
    tag: str = ""
    files_checked: int = Field(default=0, ge=0)
    total_bytes: int = Field(default=0, ge=0)
    mtime: datetime | None = None
    complete: bool
    problems: tuple[str, ...] = ()
    # True when the layout's own "latest" pointer (Megatron tracker, DeepSpeed `latest`) names it.
    pointer: bool = False
    # What validating it cost beyond directory listings: files opened, bytes read (headers,
    # tails, metadata; never a shard's data).
    files_read: int = Field(default=0, ge=0)
    bytes_read: int = Field(default=0, ge=0)
    # Format checks that could not be made (a file goodput may not read, a legacy format that
    # does not record its length): reported, not held against the checkpoint.
    unverified: tuple[str, ...] = ()


class CheckpointConfig(Frozen):
    """Where a job's checkpoints live and how they are laid out (None: auto-detect)."""

    layout: str | None = None
    root: str = Field(min_length=1, max_length=PATH_MAX)
    # generic layout only: entries of `root` matching `pattern`, step from `step_regex`'s first
    # group (RE2 syntax: linear time), complete when `marker` exists inside the directory (or next
    # to a file checkpoint).
    pattern: str = Field(default="ckpt_*", max_length=256)
    step_regex: str = Field(default=r"(\d+)", max_length=256)
    marker: str | None = Field(default=".complete", max_length=255)
    # Only the newest candidates are validated: an old run can hold hundreds of checkpoints.
    max_candidates: int = Field(default=DEFAULT_MAX_CANDIDATES, ge=1, le=1000)
    settle_s: float = Field(default=DEFAULT_SETTLE_S, ge=0.0, le=MAX_SETTLE_S, allow_inf_nan=False)


class ScanLimits(Frozen):
    """How much of a checkpoint tree one discovery may look at, whoever owns the tree.

    A tree is the job owner's: a directory of a million entries, a symlink maze or a slow
    filesystem must cost goodput a bounded amount. Per directory: `max_entries_per_dir` (a
    directory over it is a problem of the checkpoint holding it). Per root: `max_entries_total`
    entries and operations, `max_seconds` of wall time (checked between filesystem calls),
    `max_depth` directory levels below the root. Running out of the per-root budget stops
    discovery with that reason.
    """

    max_entries_per_dir: int = Field(default=100_000, ge=1)
    max_entries_total: int = Field(default=500_000, ge=1)
    max_depth: int = Field(default=8, ge=1, le=64)
    max_seconds: float = Field(default=30.0, gt=0.0, allow_inf_nan=False)


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
