"""Tailing a training job's log file: every line exactly once, across truncation, rotation, restarts.

Job stdout is where NCCL timeouts, CUDA errors and Python tracebacks first appear, so the log
detector must neither miss a line (a missed traceback is a missed incident) nor repeat one (a
repeated one is a duplicate anomaly). The tailer polls (`fstat` + `pread` from an offset), which
works on NFS and Lustre where inotify does not. Its position lives in `TailCursor`, a small model
the caller persists after handling the lines of each poll; a restarted detector resumes from it.

Guarantees, for a file that is only appended to, truncated, or rotated by rename:
* a line is emitted once its newline arrives; the bytes of a partial line are not committed to the
  cursor, so a restart re-reads them rather than losing or splitting them;
* a line longer than `max_line_bytes` is emitted at once, cut, with `truncated=True`, and the rest
  of it up to the next newline is skipped (also across restarts);
* truncation (size below our position) restarts at byte 0; rotation (the path names a new inode)
  finishes the old file through the descriptor we still hold, then starts the new one at 0;
* after a restart with a rotated file, the old file is found by inode next to the path.
Files are opened through `goodput.untrusted_files`: a symlink, a FIFO or a file the job's owner
does not own raises `UnsafeFileError` (an OSError) instead of being read.
Not detectable: a file truncated and regrown past our offset between two polls, when the byte
before our offset happens to be a newline again; writes to a rotated file after we moved on.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType

from pydantic import Field

from goodput.models import Frozen
from goodput.untrusted_files import open_job_file

MAX_LINE_BYTES = 1 << 20
TRUNCATION_MARKER = "…[truncated]"
MAX_LABEL_DIGITS = 7  # `srun -l` task ids


class TailCursor(Frozen):
    """Where a tail stands: the caller stores it (JSON) and hands it back after a restart."""

    path: str
    inode: int | None = None
    device: int | None = None
    offset: int = Field(default=0, ge=0)
    """Bytes of the file consumed: always the end of an emitted line, or inside a skipped one."""
    line_no: int = Field(default=0, ge=0)
    skipping: bool = False
    """Inside an over-long line that was already emitted cut; discard up to its newline."""


# A file's first read may return lines of any age; their write time is trusted this far back.
FIRST_READ_HORIZON = timedelta(hours=1)


class LogLine(Frozen):
    path: str
    """The name the file had when the tailer opened it (a rotated file keeps its old name here)."""
    offset: int
    """Byte offset of the line's first byte in its file."""
    line_no: int
    """1-based line number in the file (counted from where tailing began when starting at the end)."""
    inode: int | None = None
    device: int | None = None
    """Which file the line is in, whatever its name now (goodput.detect.log_marks)."""
    rank: int | None = None
    text: str
    truncated: bool = False
    observed_at: datetime
    # When the line was (at the latest) written: the file's modification time as the poll began,
    # capped at `observed_at`. Detection latency is measured from here, not from the poll.
    written_at: datetime | None = None


def split_srun_label(text: str) -> tuple[int | None, str]:
    """`srun -l` prefixes each line with the task rank, right-aligned: `  3: text` → (3, "text").

    String operations, not a regex: linear in the label whatever the line holds, and only ASCII
    digits (at most `MAX_LABEL_DIGITS`) count as a rank, so `int()` is always cheap.
    """
    start = len(text) - len(text.lstrip(" "))
    colon = text.find(":", start, start + MAX_LABEL_DIGITS + 1)
    digits = text[start:colon]
    if colon < 0 or not digits or not (digits.isascii() and digits.isdigit()):
        return None, text
    rest = text[colon + 1:]
    if rest.startswith(" "):
        return int(digits), rest[1:]
    if rest in ("", "\n"):
        return int(digits), ""
    return None, text


class LogTailer:
    """Polls one path. Not thread-safe; one tailer per file.

    `poll(observed_at)` returns the complete lines that arrived since the previous poll, at most
    `max_bytes_per_poll` worth, so one poll of a huge backlog stays bounded; the rest follows.
    """

    def __init__(self, path: str | os.PathLike[str], cursor: TailCursor | None = None, *,
                 start_at_end: bool = False, max_line_bytes: int = MAX_LINE_BYTES,
                 chunk_bytes: int = 1 << 16, max_bytes_per_poll: int = 8 << 20,
                 srun_labels: bool = True, owner_uid: int | None = None) -> None:
        self._path = Path(path)
        # The job's owner: only files that user owns are read (goodput.untrusted_files).
        self._owner_uid = owner_uid
        self._start_at_end = start_at_end and cursor is None
        self._max_line = max_line_bytes
        self._chunk = chunk_bytes
        self._budget = max(max_bytes_per_poll, 1)
        self._srun_labels = srun_labels
        self._fd: int | None = None
        self._source = str(self._path)
        self._inode: int | None = cursor.inode if cursor else None
        self._device: int | None = cursor.device if cursor else None
        self._offset = cursor.offset if cursor else 0
        self._line_no = cursor.line_no if cursor else 0
        self._skipping = cursor.skipping if cursor else False
        self._buffer = bytearray()
        self._at_newline = True
        """The byte before `_offset` is a newline we consumed (or `_offset` is 0)."""
        self._lines: list[LogLine] = []
        self._now: datetime | None = None
        self._written: datetime | None = None
        self._last_poll: datetime | None = None
        self._deferred: OSError | None = None

    # -- public ---------------------------------------------------------------------------

    @property
    def cursor(self) -> TailCursor:
        """Covers exactly the lines returned so far: persist it after handling them."""
        return TailCursor(path=str(self._path), inode=self._inode, device=self._device,
                          offset=self._offset, line_no=self._line_no, skipping=self._skipping)

    def poll(self, observed_at: datetime) -> list[LogLine]:
        """New complete lines. An OSError is raised, but never at the cost of lines already read:
        those are returned and the error is raised by the next poll instead."""
        if self._deferred is not None:
            err, self._deferred = self._deferred, None
            raise err
        self._lines, self._now = [], observed_at
        try:
            self._poll()
            self._last_poll = observed_at
        except OSError as err:
            if not self._lines:
                raise
            self._deferred = err
        return self._take()

    def _poll(self) -> None:
        if self._fd is None and not self._open_first():
            return
        self._written = self._modified()
        budget = self._budget - self._drain(self._budget)
        if budget <= 0:
            return
        try:
            current = os.stat(self._path)
        except FileNotFoundError:
            return  # removed, not yet recreated: keep what the old descriptor gives
        if (current.st_ino, current.st_dev) != (self._inode, self._device):
            budget -= self._drain(budget)  # whatever the writer added just before the rename
            if budget > 0:
                self._flush_partial()
                try:
                    self._switch(self._path, offset=0)
                except FileNotFoundError:
                    return  # replaced and removed again since the stat: the next poll retries
                self._drain(budget)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LogTailer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- opening --------------------------------------------------------------------------

    def _open_first(self) -> bool:
        try:
            current = os.stat(self._path)
        except FileNotFoundError:
            return False
        try:
            if self._inode is None:  # a fresh tail (otherwise a cursor, or our own state after close())
                offset, mid_line = (self._end_of_last_line(current.st_size) if self._start_at_end
                                    else (0, False))
                self._switch(self._path, offset=offset)
                self._skipping = mid_line
                self._at_newline = not mid_line
            elif (current.st_ino, current.st_dev) == (self._inode, self._device):
                self._switch(self._path, offset=self._offset, keep_position=True)
            elif (rotated := self._find_rotated()) is not None:
                self._switch(rotated, offset=self._offset, keep_position=True)
            else:
                self._switch(self._path, offset=0)
        except FileNotFoundError:
            return False  # gone between the stat and the open
        return True

    def _find_rotated(self) -> Path | None:
        """After a restart the old inode may live on as `train.out.1`; finish it before the new file."""
        try:
            entries = list(os.scandir(self._path.parent))
        except OSError:
            return None
        for entry in entries:
            if not entry.name.startswith(self._path.name) or entry.name == self._path.name:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (st.st_ino, st.st_dev) == (self._inode, self._device):
                return Path(entry.path)
        return None

    def _switch(self, path: Path, *, offset: int, keep_position: bool = False) -> None:
        """Read `path` from `offset`; `keep_position` resumes a cursor's line count and skip state.

        Opens before closing the current descriptor, so a failed open leaves the tail where it was.
        """
        fd = open_job_file(path, owner_uid=self._owner_uid)
        self.close()
        self._fd = fd
        st = os.fstat(fd)
        self._source = str(path)
        self._inode, self._device = st.st_ino, st.st_dev
        self._buffer.clear()
        if keep_position and (st.st_size < offset or (
                offset > 0 and not self._skipping and os.pread(self._fd, 1, offset - 1) != b"\n")):
            offset, keep_position = 0, False  # truncated (or rewritten) while we were away
        self._offset = offset
        if not keep_position:
            self._line_no, self._skipping = 0, False
        self._at_newline = not self._skipping

    def _end_of_last_line(self, size: int) -> tuple[int, bool]:
        """Start-at-end begins after the last newline, so the line being written is read whole.

        With no newline in the last `max_line_bytes`, it starts inside that over-long line and
        skips to its end (the second value), like the rest of an over-long line.
        """
        fd = open_job_file(self._path, owner_uid=self._owner_uid)
        try:
            start = max(0, size - self._max_line)
            tail = os.pread(fd, size - start, start)
        finally:
            os.close(fd)
        newline = tail.rfind(b"\n")
        return (start + newline + 1, False) if newline >= 0 else (start, start > 0)

    # -- reading --------------------------------------------------------------------------

    def _drain(self, budget: int) -> int:
        """Read the current descriptor to EOF (or `budget` bytes); returns bytes read."""
        assert self._fd is not None
        self._detect_truncation()
        used = 0
        while used < budget:
            position = self._offset + len(self._buffer)
            chunk = os.pread(self._fd, min(self._chunk, budget - used), position)
            if not chunk:
                break
            used += len(chunk)
            self._consume(chunk)
        return used

    def _detect_truncation(self) -> None:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        position = self._offset + len(self._buffer)
        truncated = size < position
        if not truncated and size > position and self._offset > 0 and self._at_newline:
            # Truncated and regrown past our offset since the last poll? The byte before our
            # offset was a newline we consumed; if it no longer is, the file was rewritten.
            truncated = os.pread(self._fd, 1, self._offset - 1) != b"\n"
        if truncated:
            self._flush_partial()
            self._offset, self._line_no, self._skipping = 0, 0, False

    def _consume(self, chunk: bytes) -> None:
        buffer = self._buffer
        buffer += chunk
        start = 0
        while (newline := buffer.find(b"\n", start)) >= 0:
            line_offset = self._offset
            self._offset += newline + 1 - start
            self._at_newline = True
            if self._skipping:
                self._skipping = False
            else:
                self._emit(bytes(buffer[start:newline]), line_offset)
            start = newline + 1
        del buffer[:start]
        if self._skipping:
            self._offset += len(buffer)
            self._at_newline = False
            buffer.clear()
        elif len(buffer) > self._max_line:
            line_offset = self._offset
            self._offset += len(buffer)
            self._at_newline = False
            self._emit(bytes(buffer), line_offset)
            buffer.clear()
            self._skipping = True

    def _flush_partial(self) -> None:
        """The unterminated last line of a file we are leaving is still a line."""
        if self._buffer and not self._skipping:
            line_offset = self._offset
            self._offset += len(self._buffer)
            self._at_newline = False
            self._emit(bytes(self._buffer), line_offset)
        self._buffer.clear()
        self._skipping = False

    def _emit(self, raw: bytes, offset: int) -> None:
        assert self._now is not None
        truncated = len(raw) > self._max_line
        if truncated:
            raw = raw[:self._max_line]
        elif raw.endswith(b"\r"):
            raw = raw[:-1]
        text = raw.decode("utf-8", errors="replace")
        if truncated:
            text += TRUNCATION_MARKER
        rank = None
        if self._srun_labels:
            rank, text = split_srun_label(text)
        self._line_no += 1
        self._lines.append(LogLine(path=self._source, offset=offset, line_no=self._line_no, rank=rank,
                                   inode=self._inode, device=self._device,
                                   text=text, truncated=truncated, observed_at=self._now,
                                   written_at=self._written))

    def _modified(self) -> datetime | None:
        """The open file's modification time, kept between the previous poll (new lines were
        written after it) and this one: the job owns the file and can set its mtime to anything."""
        assert self._now is not None and self._fd is not None
        try:
            mtime = datetime.fromtimestamp(os.fstat(self._fd).st_mtime, UTC)
        except (OSError, OverflowError, ValueError):
            return None
        return max(min(mtime, self._now), self._earliest_write())

    def _earliest_write(self) -> datetime:
        """The earliest a line read by this poll can have been written, as far as goodput knows:
        the previous poll (or an hour back, on a first read of a file)."""
        assert self._now is not None
        return self._last_poll or self._now - FIRST_READ_HORIZON

    def _take(self) -> list[LogLine]:
        lines, self._lines = self._lines, []
        return lines
