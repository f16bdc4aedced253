"""The audit trail: every action goodput took on the cluster and every operator decision, as records.

Sites hand goodput the power to drain nodes and restart jobs only if they can answer, later, who
did what to which node or job, when, why, and whether it worked. Each record says that once. The
recovery workflow appends them as it acts (deterministically, so each incident's records are part
of its report and can be rebuilt from its workflow history), and an activity writes them to an
append-only log that outlives the Temporal server's retention (`AuditLog`; the file one is
activities.adapters.audit). This module is the vocabulary and the exports, pure.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from pydantic import Field

from goodput.models import Frozen

GOODPUT_ACTOR = "goodput"


class AuditAction(StrEnum):
    """What was done or decided: goodput's actions on Slurm and operators' decisions."""

    DRAIN = "drain"
    REQUEUE = "requeue"
    RESUBMIT = "resubmit"
    STOP = "stop"
    APPROVE = "approve"
    CANCEL = "cancel"
    KILL_SWITCH_ON = "kill-switch-on"
    KILL_SWITCH_OFF = "kill-switch-off"
    UNDRAIN = "undrain"
    BREAKER_TRIP = "breaker-trip"
    BREAKER_RESET = "breaker-reset"
    AUTONOMY_EARNED = "autonomy-earned"  # a rule's record cleared the bar (goodput.recover.trust)
    AUTONOMY_LOST = "autonomy-lost"
    AUTONOMY_PINNED = "autonomy-pinned"  # an operator pinned (or unpinned) a rule


class AuditRecord(Frozen):
    """One action or decision: who, what, on which job and nodes, why, and what came of it."""

    # Stable across retries and rebuilds: `<incident id>#<n>`, n counting the incident's records.
    id: str = Field(min_length=1, max_length=300)
    at: datetime
    actor: str = Field(min_length=1, max_length=160)  # "goodput", or "operator:<who>"
    action: AuditAction
    incident_id: str = Field(max_length=256)
    cluster: str = Field(max_length=128)
    job_id: str = Field(max_length=64)
    nodes: tuple[str, ...] = ()
    reason: str = Field(default="", max_length=2000)
    result: str = Field(default="", max_length=2000)
    mode: str = ""
    origin: str = Field(default="", max_length=200)  # where an operator acted from


class AuditLog(Protocol):
    """Where audit records are kept: appended once each (by id), never rewritten."""

    def append(self, records: Sequence[AuditRecord]) -> None:
        """Keep `records`, skipping any whose id is already kept."""
        ...

    def read(self) -> list[AuditRecord]:
        """Every record kept, as written (unreadable lines are skipped and counted)."""
        ...


FIELDS = ("at", "actor", "action", "incident_id", "cluster", "job_id", "nodes", "reason", "result", "mode", "id",
          "origin")


def merged(*sources: Iterable[AuditRecord]) -> list[AuditRecord]:
    """Records of several sources (the log, rebuilt histories), each once, oldest first."""
    seen: dict[str, AuditRecord] = {}
    for source in sources:
        for record in source:
            seen.setdefault(record.id, record)
    return sorted(seen.values(), key=lambda r: (r.at, r.id))


def since(records: Iterable[AuditRecord], start: datetime | None) -> list[AuditRecord]:
    """The records at or after `start` (all of them when it is None)."""
    return [r for r in records if start is None or r.at >= start]


def to_jsonl(records: Sequence[AuditRecord]) -> str:
    """The records as JSON lines, keys sorted."""
    return "".join(json.dumps(r.model_dump(mode="json"), sort_keys=True) + "\n" for r in records)


def _cell(value: str) -> str:
    # A cell a spreadsheet would run as a formula is shown as text: reasons are typed by people.
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def to_csv(records: Sequence[AuditRecord]) -> str:
    """The records as CSV with a header; a cell a spreadsheet would run as a formula is quoted as text."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(FIELDS)
    for r in records:
        row = {**r.model_dump(mode="json"), "nodes": " ".join(r.nodes)}
        writer.writerow([_cell(str(row[f])) for f in FIELDS])
    return out.getvalue()


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime) -> datetime:
    """`--since`: an age (`90m`, `24h`, `7d`) before `now`, or an ISO 8601 time (UTC when it
    names no zone). Raises ValueError with the accepted forms."""
    text = text.strip()
    if len(text) >= 2 and text[-1] in _UNITS and text[:-1].isascii() and text[:-1].isdigit() and len(text) < 12:
        return now - timedelta(seconds=int(text[:-1]) * _UNITS[text[-1]])
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since {text[:40]!r}: give an age like 90m, 24h, 7d or an ISO time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
