"""The node agent's kernel-log source: a tailed file, read through goodput.detect.kernel_origin.

The tailer (rotation, truncation, a cursor that survives restarts) and the origin rules (only the
kernel's records count) are each tested on their own; this adapter joins them and keeps one
promise of its own: the cursor it hands out never splits a journal export record, so a record
cut by an agent restart is read whole afterwards.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from goodput.detect.gpu import XidEvent
from goodput.detect.kernel_origin import KernelReader
from goodput.detect.logtail import LogLine, LogTailer, TailCursor


class KernelLog:
    """Xids from a kernel log file: kern.log / dmesg text, or `journalctl -k -o export` records,
    believing kernel-origin records only (goodput.detect.kernel_origin).

    Export records span several lines and are judged whole (`_TRANSPORT` may follow `MESSAGE`);
    a record cut by a poll is completed by the next one, and while one is open the cursor stays
    at its first line, so a restarted agent reads it whole.
    """

    def __init__(self, path: Path, cursor: TailCursor | None, node: str, *, accept_mixed: bool = False) -> None:
        if cursor is not None and cursor.path != str(path):
            cursor = None  # the configured file changed: its old position means nothing
        # Without a cursor, start at the end: yesterday's Xids are not today's jobs' faults.
        # A file that appears only later (a journal export started after us) is new from its first byte.
        self._tailer = LogTailer(path, cursor, start_at_end=cursor is None and path.exists(), srun_labels=False)
        self._reader = KernelReader(node, accept_mixed=accept_mixed)
        self._record_start: LogLine | None = None

    @property
    def cursor(self) -> TailCursor:
        cursor, start = self._tailer.cursor, self._record_start
        if start is None or not self._reader.in_record or (start.inode, start.device) != (cursor.inode, cursor.device):
            return cursor  # no record open (or it began in a file rotated away: that one is lost)
        return cursor.model_copy(update={"offset": start.offset, "line_no": max(0, start.line_no - 1),
                                         "skipping": False})

    @property
    def reader(self) -> KernelReader:
        return self._reader

    def poll(self, now: datetime) -> list[XidEvent]:
        events = []
        for line in self._tailer.poll(now):
            opened = self._reader.in_record
            if (event := self._reader.feed(line.text, line.observed_at)) is not None:
                events.append(event)
            if not opened and self._reader.in_record:
                self._record_start = line
        return events

    def close(self) -> None:
        self._tailer.close()

