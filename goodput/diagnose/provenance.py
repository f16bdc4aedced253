"""Is a pushed line the job's own output? Only then may it move goodput to act on that job.

A log shipper tails files and takes each record's job id from the file's name. On a shared,
user-writable log directory any local user can create `slurm-x-slurm-<victim>.out`, and a shipper
whose job-id pattern is anchored only at the end sends its lines as the victim's. goodput therefore
believes a pushed record's job id only when the record's file is the file Slurm writes that job's
output to: the job's StdOut or StdErr path exactly as the scheduler records it (scontrol prints it
expanded), and, where goodput can see the file, owned by the job's user (slurmd creates it as that
user). Anything else (another path, no path, a path Slurm left as a `%` pattern, a job whose
record names no output) is evidence only: reported in the incident with the reason, never a
reason to drain, requeue, cancel or hold.

Pure: the caller gives the owners it could read (`lstat`, never an open) as a mapping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from goodput.models import MAX_PUSHED_PATH, Anomaly
from goodput.scheduler import JobInfo


class PushedPathError(ValueError):
    """A record's file field that is no path goodput will carry; the message says why."""


def check_pushed_path(value: str) -> str:
    """The record's file field as given, or PushedPathError: bounded, UTF-8, and printable (a newline
    or a bidi override would forge lines in the incident's timeline; no real output path holds one)."""
    if len(value) > MAX_PUSHED_PATH:
        raise PushedPathError(f"file path is {len(value)} characters long (limit {MAX_PUSHED_PATH})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" is valid JSON): no path, and no Temporal payload
        raise PushedPathError("file path is not valid UTF-8") from None
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        raise PushedPathError(f"file path holds the unprintable character {bad!r}")
    return value


def printable(text: str, limit: int) -> str:
    """A path inside a message: one printable line of bounded length."""
    shown = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return shown + ("…" if len(text) > limit else "")


def output_paths(job: JobInfo) -> tuple[str, ...]:
    """The job's output files as Slurm records them, only those that are concrete paths."""
    return tuple(dict.fromkeys(p for p in (job.stdout_path, job.stderr_path) if p and "%" not in p))


def unverified_reason(anomaly: Anomaly, job: JobInfo | None, owners: Mapping[str, int] | None = None) -> str:
    """"" when the anomaly may move goodput to act, else why it is evidence only.

    Anything goodput observed itself (`pushed` is None) may act. A pushed one may act only when its
    file is one of the job's output paths and, if `owners` holds that path's owner, the job's user
    owns it.
    """
    if anomaly.pushed is None:
        return ""
    claimed = anomaly.pushed.file
    if not claimed:
        return "the pushed record names no file, so nothing shows it is the job's own output"
    shown = printable(claimed, 300)
    if job is None:
        return f"pushed from {shown!r}; the scheduler has no record of job {anomaly.job_id} to check it against"
    paths = output_paths(job)
    if not paths:
        recorded = [p for p in (job.stdout_path, job.stderr_path) if p]
        what = f"only the pattern {printable(recorded[0], 300)!r}" if recorded else "no output path"
        return f"pushed from {shown!r}, but Slurm records {what} for job {job.job_id}: it cannot be checked"
    if claimed not in paths:
        return (f"pushed from {shown!r}, which is not job {job.job_id}'s output "
                f"({', '.join(repr(printable(p, 300)) for p in paths)})")
    owner = (owners or {}).get(claimed)
    if owner is not None and owner != job.user_id:
        whose = f"by the job's user (uid {job.user_id})" if job.user_id is not None else "(Slurm names no job owner)"
        return (f"pushed from {shown!r}, job {job.job_id}'s output path, but that file is owned by uid {owner}, "
                f"not {whose}")
    return ""


@dataclass(frozen=True, slots=True)
class Sorted:
    """An incident's evidence, split by whether it may move goodput to act."""

    actionable: tuple[Anomaly, ...]
    evidence_only: tuple[tuple[Anomaly, str], ...] = field(default=())

    @property
    def note(self) -> str:
        """One line for the incident: how many anomalies were set aside, and the first reason."""
        if not self.evidence_only:
            return ""
        count = len(self.evidence_only)
        first = self.evidence_only[0][1]
        return (f"{count} pushed anomal{'y is' if count == 1 else 'ies are'} evidence only, never acted on: "
                f"{first}")


def sort_evidence(anomalies: Sequence[Anomaly], job: JobInfo | None,
                  owners: Mapping[str, int] | None = None) -> Sorted:
    actionable: list[Anomaly] = []
    aside: list[tuple[Anomaly, str]] = []
    for anomaly in anomalies:
        why = unverified_reason(anomaly, job, owners)
        if why:
            aside.append((anomaly, why))
        else:
            actionable.append(anomaly)
    return Sorted(actionable=tuple(actionable), evidence_only=tuple(aside))


def pushed_files(anomalies: Sequence[Anomaly], job: JobInfo | None) -> tuple[str, ...]:
    """The pushed files whose owner the caller should read: those that are the job's output paths."""
    if job is None:
        return ()
    paths = output_paths(job)
    return tuple(dict.fromkeys(a.pushed.file for a in anomalies if a.pushed is not None and a.pushed.file in paths))
