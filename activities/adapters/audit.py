"""The audit log on disk: one JSON object per line, appended, fsynced, never rewritten.

The Temporal server keeps closed workflows only for its retention period; the audit trail must
outlive that and survive restarts of both the worker and the server. Appends are one `write` of
whole lines to a file opened O_APPEND (concurrent workers on one host interleave whole records),
followed by fsync. An activity retried after a crash may append a record twice: readers keep the
first of each id. A line that does not parse (a torn write at a crash) is skipped and counted,
never fatal.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from goodput.recover.audit import AuditRecord, merged, to_jsonl


class JsonlAuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.skipped_lines = 0

    def append(self, records: Sequence[AuditRecord]) -> None:
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = to_jsonl(records).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[AuditRecord]:
        if not self.path.exists():
            return []
        records: list[AuditRecord] = []
        self.skipped_lines = 0
        with self.path.open("rb") as log:
            for line in log:
                try:
                    records.append(AuditRecord.model_validate(json.loads(line)))
                except (ValueError, ValidationError):
                    self.skipped_lines += 1
        return merged(records)


class MemoryAuditLog:
    """The demo cluster's and the tests' log: the same contract, in memory."""

    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    def append(self, records: Sequence[AuditRecord]) -> None:
        self.records.extend(records)

    def read(self) -> list[AuditRecord]:
        return merged(self.records)
