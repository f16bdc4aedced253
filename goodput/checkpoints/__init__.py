"""Checkpoint-aware resume: find a job's checkpoints, validate them cheaply, pick the resume point.

Pure domain code over a small filesystem seam (`FileSystem`: list, stat, read small text or a
bounded byte range, confine to a root): shard data is never read, only headers and end records
(`verify`, `formats`; pickles are interpreted as data by `safepickle`, never run), so it is cheap
on multi-terabyte checkpoints. Layout plugins live in their own modules (megatron, deepspeed, hf,
lightning, dcp/torchtitan/nemo, generic);
`discover` picks one, `choose_resume_point` walks newest to oldest, and `lost_work` prices the
work a failure undid. The tree is the job owner's and untrusted: `localfs` confines and bounds
every read, `metadata` bounds every parse, and `finder` decides whose permissions it is read with.
"""

from goodput.checkpoints.discover import AUTO_ORDER, LAYOUTS, discover, layout_name
from goodput.checkpoints.finder import (
    CheckpointFinder,
    FinderRequest,
    Finding,
    InProcessFinder,
    ReadMode,
    request_for,
)
from goodput.checkpoints.fs import (
    SMALL_TEXT_LIMIT,
    BudgetExhaustedError,
    Entry,
    FileSystem,
    NotRegularFileError,
    OutsideRootError,
    RefusedError,
    TooLargeError,
    TooManyEntriesError,
)
from goodput.checkpoints.jobconfig import CheckpointCommentError, config_from_comment, to_comment
from goodput.checkpoints.localfs import LocalFileSystem
from goodput.checkpoints.lostwork import IncidentLoss, LostWorkSummary, lost_work, lost_work_of, summarize_lost_work
from goodput.checkpoints.model import (
    Checkpoint,
    CheckpointConfig,
    Discovery,
    LostWork,
    ResumeChoice,
    ScanLimits,
    SkippedCheckpoint,
)
from goodput.checkpoints.resume import choose_resume_point, find_resume_point

__all__ = [
    "AUTO_ORDER",
    "LAYOUTS",
    "SMALL_TEXT_LIMIT",
    "BudgetExhaustedError",
    "Checkpoint",
    "CheckpointCommentError",
    "CheckpointConfig",
    "CheckpointFinder",
    "Discovery",
    "Entry",
    "FileSystem",
    "FinderRequest",
    "Finding",
    "InProcessFinder",
    "IncidentLoss",
    "LocalFileSystem",
    "LostWork",
    "LostWorkSummary",
    "NotRegularFileError",
    "OutsideRootError",
    "ReadMode",
    "RefusedError",
    "ResumeChoice",
    "ScanLimits",
    "SkippedCheckpoint",
    "TooLargeError",
    "TooManyEntriesError",
    "choose_resume_point",
    "config_from_comment",
    "discover",
    "find_resume_point",
    "layout_name",
    "lost_work",
    "lost_work_of",
    "request_for",
    "summarize_lost_work",
    "to_comment",
]
