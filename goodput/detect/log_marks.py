"""Where a job's log lines already reached its incident, so a watcher resumed on another worker
reads on without losing a line or sending one twice.

A log watcher heartbeats its file cursors, but Temporal sends an activity's heartbeats at most
every 0.8 x its heartbeat timeout. When a worker dies, the watcher resumes elsewhere from a cursor
up to that old and reads again lines whose anomaly the incident already has. The detector reports
one anomaly per batch of lines, named after the batch's first decisive line. A re-read batch that
holds those old lines and new ones therefore carries the old anomaly's name, and the incident
would discard it as a repeat, new lines and all: lost evidence.

So every log anomaly carries a `LogMark` per file, the last line its batch covered; the incident
keeps the furthest mark per file, and a resuming watcher asks for them. Between its resumed cursor
and the mark it reads lines for progress only, never for matches: those went out already. The
window closes at the first line past the mark, or at a line before the cursor (the file was
truncated meanwhile), so it never hides a line the incident has not seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import Field

from goodput.detect.logtail import LogLine, TailCursor
from goodput.models import Frozen, LogMark

# Per incident: a job writes a handful of files; a long-lived incident cannot grow without bound.
MAX_MARKS = 16


def _file_of(path: str, inode: int | None, device: int | None) -> tuple[object, ...]:
    """A file by identity where known (a rotated file changes name, not inode), else by name."""
    return ("inode", inode, device) if inode is not None else ("path", path)


def _mark_file(mark: LogMark) -> tuple[object, ...]:
    return _file_of(mark.path, mark.inode, mark.device)


def marks_of(lines: Sequence[LogLine]) -> tuple[LogMark, ...]:
    """The furthest line of each file in one batch."""
    furthest: dict[tuple[object, ...], LogLine] = {}
    for line in lines:
        file = _file_of(line.path, line.inode, line.device)
        if file not in furthest or line.offset > furthest[file].offset:
            furthest[file] = line
    return tuple(LogMark(path=line.path, inode=line.inode, device=line.device, offset=line.offset)
                 for line in furthest.values())[:MAX_MARKS]


def merge(kept: Sequence[LogMark], new: Iterable[LogMark]) -> tuple[LogMark, ...]:
    """The furthest mark per file; the files advanced most recently when there are too many."""
    by_file = {_mark_file(mark): mark for mark in kept}
    for mark in new:
        file = _mark_file(mark)
        before = by_file.pop(file, None)
        by_file[file] = mark if before is None or mark.offset >= before.offset else before
    return tuple(by_file.values())[-MAX_MARKS:]


class Replay(Frozen):
    """Lines of one file, from `start` through the mark's line, that already reached the incident."""

    mark: LogMark
    start: int = Field(ge=0)


def replays(delivered: Sequence[LogMark], cursors: Sequence[TailCursor]) -> tuple[Replay, ...]:
    """What a resuming watcher will read again: from each file's resumed cursor (the file's start
    without one) through the incident's mark, for the marks not already behind the cursor."""
    resumed = {_file_of(c.path, c.inode, c.device): c.offset for c in cursors}
    by_path = {c.path: c.offset for c in cursors}
    found: list[Replay] = []
    for mark in delivered[:MAX_MARKS]:
        start = resumed.get(_mark_file(mark), by_path.get(mark.path, 0) if mark.inode is None else 0)
        if start <= mark.offset:
            found.append(Replay(mark=mark, start=start))
    return tuple(found)


def _replay_for(line: LogLine, open_replays: Sequence[Replay]) -> Replay | None:
    file = _file_of(line.path, line.inode, line.device)
    return next((r for r in open_replays if _mark_file(r.mark) == file), None)


def sort_out(line: LogLine, open_replays: tuple[Replay, ...]) -> tuple[bool, tuple[Replay, ...]]:
    """Whether `line` already reached the incident, and the replays still open after it: lines
    come in file order, so one past the mark, or before the start (the file was truncated), closes
    its file's replay for good."""
    replay = _replay_for(line, open_replays)
    if replay is None:
        return False, open_replays
    if replay.start <= line.offset <= replay.mark.offset:
        return True, open_replays
    return False, tuple(r for r in open_replays if r is not replay)
