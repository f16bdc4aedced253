"""The resume point: the newest checkpoint that is complete and has settled, and why not newer.

Pure (the clock comes in as `now`) so a workflow can call it directly and replay it. A checkpoint
whose newest file was modified less than `settle_s` before `now` may still be being written by a
straggling rank or an async writer, so it is not trusted yet; a corrupt or partial one is passed
over for the previous valid one. Every checkpoint passed over is listed with its reason, because
resuming from an older step costs GPU-hours and the operator should see why.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from goodput.checkpoints.discover import discover
from goodput.checkpoints.fs import FileSystem
from goodput.checkpoints.model import Checkpoint, CheckpointConfig, Discovery, ResumeChoice, SkippedCheckpoint


def _describe(checkpoint: Checkpoint) -> str:
    return f"step {checkpoint.step} ({checkpoint.path})"


def _pointer_note(chosen: Checkpoint, candidates: list[Checkpoint]) -> str:
    """When the framework's own pointer names a checkpoint passed over (newer, or damaged so that
    its step is unknown, like a cut `last.ckpt`), the job would load that one unaided: goodput
    never rewrites the job's files, so it says so and exports its choice."""
    if chosen.pointer:
        return ""
    named = next((c for c in candidates if c.pointer and c is not chosen and (c.step > chosen.step or not c.complete)),
                 None)
    if named is None:
        return ""
    step = f"step {named.step}" if named.complete or named.step else "its step unreadable"
    return (f"; the framework's own pointer names {named.tag or named.path} ({step}), which was passed "
            f"over: a job that follows its pointer loads that one unless told step {chosen.step} "
            "(GOODPUT_RESUME_FROM/GOODPUT_RESUME_STEP on resubmission; docs/checkpoints.md)")


def choose_resume_point(checkpoints: Iterable[Checkpoint], now: datetime, settle_s: float) -> ResumeChoice:
    ordered = sorted(checkpoints, key=lambda c: (-c.step, c.complete, c.path))
    skipped: list[SkippedCheckpoint] = []
    recheck: float | None = None
    chosen: Checkpoint | None = None
    for checkpoint in ordered:
        if not checkpoint.complete:
            reason = "; ".join(checkpoint.problems) or "incomplete"
        elif checkpoint.mtime is None:
            reason = "no files seen, so no modification time to trust"
        else:
            age = (now - checkpoint.mtime).total_seconds()
            if age < settle_s:
                wait = settle_s - age
                recheck = wait if recheck is None else min(recheck, wait)
                reason = (f"newest file modified {age:.0f}s ago, less than the {settle_s:.0f}s settle time: "
                          "may still be being written")
            else:
                chosen = checkpoint
                break
        skipped.append(SkippedCheckpoint(checkpoint=checkpoint, reason=reason))

    passed = "; ".join(f"skipped {_describe(s.checkpoint)}: {s.reason}" for s in skipped)
    if chosen is not None:
        head = f"resume from {_describe(chosen)}, layout {chosen.layout}"
        explanation = f"{head}; {passed}" if skipped else f"{head}: the newest checkpoint, complete and settled"
        explanation += _pointer_note(chosen, ordered)
    elif skipped:
        explanation = f"no valid checkpoint: {passed}"
    else:
        explanation = "no checkpoint found"
    return ResumeChoice(checkpoint=chosen, skipped=tuple(skipped), explanation=explanation,
                        recheck_after_s=recheck)


def find_resume_point(fs: FileSystem, config: CheckpointConfig, now: datetime) -> tuple[Discovery, ResumeChoice]:
    """Discovery and choice in one call, with the root's own problems in the explanation."""
    found = discover(fs, config)
    choice = choose_resume_point(found.checkpoints, now, config.settle_s)
    if found.problems:
        choice = choice.model_copy(update={"explanation": f"{choice.explanation}; {'; '.join(found.problems)}"})
    return found, choice
