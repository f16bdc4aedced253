"""Validation of the identifiers goodput passes to schedulers.

Node names, job ids, partitions and reasons come from logs, HTTP bodies and operators; they end
up as arguments to `scontrol`, SSH commands and REST paths. They are checked here, once, so that
a hostile name (`node1;rm -rf /`, a newline, 10 kB of junk) is a clear error long before any
backend sees it. No backend ever builds a shell string, but these checks keep bad names out of
drain reasons, workflow ids and logs too.
"""

from __future__ import annotations

import re

MAX_NAME = 128
MAX_REASON = 512

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_JOB = re.compile(r"^[0-9]+(?:_[0-9]+)?(?:\+[0-9]+)?$")
_CLUSTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_PARTITION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_RESERVATION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class InvalidIdentifierError(ValueError):
    """An identifier that no scheduler call may carry."""


def _check(kind: str, value: str, pattern: re.Pattern[str], limit: int = MAX_NAME) -> str:
    if not isinstance(value, str):
        raise InvalidIdentifierError(f"{kind} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidIdentifierError(f"{kind} must not be empty")
    if len(value) > limit:
        raise InvalidIdentifierError(f"{kind} is {len(value)} characters long (limit {limit})")
    if not pattern.fullmatch(value):
        raise InvalidIdentifierError(f"invalid {kind} {value[:60]!r}: unexpected characters")
    return value


def validate_node_name(value: str) -> str:
    return _check("node name", value, _NODE)


def validate_job_id(value: str) -> str:
    """Slurm job ids: `123`, array tasks `123_4`, het job components `123+1`."""
    return _check("job id", value, _JOB, limit=32)


def validate_cluster(value: str) -> str:
    return _check("cluster name", value, _CLUSTER)


def validate_partition(value: str) -> str:
    return _check("partition", value, _PARTITION)


def validate_reservation(value: str) -> str:
    """Slurm reservation names (the hot-spare pool's, from policy): one plain scontrol word."""
    return _check("reservation name", value, _RESERVATION)


def validate_reason(value: str) -> str:
    """Free text for drain reasons: printable, one line, bounded."""
    if not value:
        raise InvalidIdentifierError("reason must not be empty")
    if len(value) > MAX_REASON:
        raise InvalidIdentifierError(f"reason is {len(value)} characters long (limit {MAX_REASON})")
    if any(not ch.isprintable() for ch in value):
        raise InvalidIdentifierError("reason must be one line of printable characters")
    return value
