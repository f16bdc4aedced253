"""goodput owns only what it did: the drain-reason convention that proves it.

Every drain goodput makes carries `goodput:<incident-id>: <summary>`. A node whose reason lacks
the prefix (an admin's drain, Slurm's own "Not responding") is never resumed or overwritten.
"""

from __future__ import annotations

import re

from goodput.identifiers import MAX_REASON, validate_reason

PREFIX = "goodput:"
_OWNED = re.compile(r"^goodput:(?P<incident>[A-Za-z0-9_.\-]+):")


def drain_reason(incident_id: str, summary: str) -> str:
    summary = " ".join(summary.split()) or "isolated by goodput"
    reason = f"{PREFIX}{incident_id}: {summary}"
    return validate_reason(reason[:MAX_REASON])


def owning_incident(reason: str) -> str | None:
    """The incident id a drain reason belongs to, or None if goodput did not set it."""
    match = _OWNED.match(reason or "")
    return match.group("incident") if match else None


def is_goodput_reason(reason: str) -> bool:
    return owning_incident(reason) is not None
