"""Slurm's error messages mapped to goodput's retryable / permanent scheduler errors.

Slurm's commands exit 1 for everything, so the only signal is the text. The activity boundary
retries TransientSchedulerError (slurmctld restarting, a failover, a socket timeout) and gives up
on the permanent ones; a wrong guess either hammers a broken request or drops a recovery, so the
phrases below were collected from real failures (see tests/fixtures/slurm/errors-*.txt).

It also holds the errors for Slurm output goodput will not read: a `scontrol show` record whose
keys a job's own text could have forged (SlurmRecordError, AmbiguousRecordError). They are
permanent for the text that produced them; the CLI backend answers reads from JSON instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from goodput.scheduler import (
    PermanentSchedulerError,
    SchedulerError,
    TransientSchedulerError,
    UnknownJobError,
    UnknownNodeError,
)

TRANSIENT_PHRASES = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "connection timed out",
    "connection reset",
    "zero bytes were transmitted",
    "communication connection failure",
    "transport endpoint is not connected",
    "resource temporarily unavailable",
    "slurm temporarily unable to accept job",
    "slurmctld is busy",
    "backup controller in standby mode",
    "controller is not responding",
    "lost connection",
    "unable to contact slurmctld",
    "unable to establish controller machine",
    "could not establish a configuration source",
    "munge_encode failed",
    "munged: connection",
    "protocol authentication error",
    # `scontrol requeue` while slurmctld is down prints only this (22.05)
    "unexpected message received",
)
MAX_ERROR_TEXT = 64 * 1024  # only the head of a huge stderr is looked at
UNKNOWN_JOB_PHRASES = ("invalid job id specified", "invalid job id", "unknown job")
UNKNOWN_NODE_PHRASES = ("invalid node name specified", "invalid hostlist", "unable to find node",
                        "invalid node name")


class SlurmRecordError(PermanentSchedulerError):
    """`scontrol show` text goodput will not trust: malformed, not the job or node asked for, or
    out of the bounds goodput reads."""


class AmbiguousRecordError(SlurmRecordError):
    """A record that could be read more than one way: a key twice, a key Slurm would not print
    there, or free text followed by what may be a key inside that text."""


def classify(argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> SchedulerError:
    """The exception a failed Slurm command stands for (the caller raises it)."""
    head = f"{stderr[:MAX_ERROR_TEXT].strip()} {stdout[:MAX_ERROR_TEXT].strip()}"
    message = " ".join(head.split())[:500] or f"exit status {returncode}"
    lowered = message.lower()
    where = f"{argv[0] if argv else '?'} {argv[1] if len(argv) > 1 else ''}".strip()
    if returncode < 0:
        # Killed by a signal, or (over SSH) cut off with its connection: it may or may not have
        # taken effect, which a retry of an idempotent step sorts out; it is never a verdict.
        detail = f": {message[:400]}" if head.strip() else ""
        return TransientSchedulerError(f"{where}: no exit status (killed, or its connection dropped); it may or may "
                                       f"not have run{detail}")
    text = f"{where}: {message}"
    if any(phrase in lowered for phrase in TRANSIENT_PHRASES):
        return TransientSchedulerError(text)
    if any(phrase in lowered for phrase in UNKNOWN_JOB_PHRASES):
        return UnknownJobError(text)
    if any(phrase in lowered for phrase in UNKNOWN_NODE_PHRASES) or (
            lowered.startswith("node ") and lowered.endswith("not found")):
        return UnknownNodeError(text)
    return PermanentSchedulerError(text)


def is_pending_execution(stderr: str) -> bool:
    """`scontrol requeue` on a job that is already pending (or still completing a requeue)."""
    return "job is pending execution" in stderr[:MAX_ERROR_TEXT].lower()


def is_already_finished(stderr: str) -> bool:
    lowered = stderr[:MAX_ERROR_TEXT].lower()
    return "already completing or completed" in lowered or "job has already finished" in lowered
