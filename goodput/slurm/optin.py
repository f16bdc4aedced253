"""Which jobs goodput may act on: only those whose owners opted in.

A training team opts a job in with a comment marker (`sbatch --comment=goodput:opt-in`) or the
operator allowlists whole partitions. Everything else is observed at most, never requeued,
held, cancelled or resubmitted: goodput acting on a job nobody asked it to touch would be worse
than the failure it was recovering from.
"""

from __future__ import annotations

from collections.abc import Collection

from goodput.scheduler import JobInfo, NotOwnedError

DEFAULT_MARKER = "goodput:opt-in"


class NotOptedInError(NotOwnedError):
    """The job carries no opt-in marker and its partition is not allowlisted."""


def is_opted_in(job: JobInfo, allow_partitions: Collection[str] = (),
                comment_marker: str = DEFAULT_MARKER) -> bool:
    """True when the job's comment contains the marker or its partition is allowlisted.

    An empty marker never matches (it would opt in every job).
    """
    if comment_marker and comment_marker in (job.comment or ""):
        return True
    return bool(job.partition) and job.partition in set(allow_partitions)
