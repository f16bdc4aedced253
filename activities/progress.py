"""Reading a resumed job's output for progress past its checkpoint, and where its output ends now.

Verification must not stop at RUNNING: a job that restarts and then dies loading a corrupt
checkpoint, or hangs in NCCL init, is RUNNING for a while. The resumed attempt's lines come after
the output sizes recorded just before the resume (or from the start, if Slurm truncated the file).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from goodput.detect.progress import ProgressKind, ProgressParser
from goodput.untrusted_files import file_size, open_job_file

_CHUNK = 1 << 20


def output_sizes(paths: Iterable[str]) -> dict[str, int]:
    # 0 when not created yet (the new attempt starts it) or not a regular file (never read anyway)
    return {path: file_size(path) or 0 for path in paths}


class ProgressReader:
    """Follows files from given offsets and remembers the highest step printed since."""

    def __init__(self, offsets: dict[str, int], parser: ProgressParser | None = None, *,
                 owner_uid: int | None = None) -> None:
        self._offsets = dict(offsets)
        self._owner_uid = owner_uid
        self._partial: dict[str, bytes] = {}
        self._parser = parser or ProgressParser()
        self.highest: int | None = None

    def poll(self, paths: Iterable[str]) -> int | None:
        for path in paths:
            self._read(path)
        return self.highest

    def _read(self, path: str) -> None:
        try:
            fd = open_job_file(path, owner_uid=self._owner_uid)
        except OSError:  # not there yet, or not a file of the job's (UnsafeFileError): no progress
            return
        try:
            size = os.fstat(fd).st_size
            offset = self._offsets.get(path, 0)
            if size < offset:  # truncated: the new attempt rewrote the file
                offset, self._partial[path] = 0, b""
            if size == offset:
                return
            chunk = os.pread(fd, min(size - offset, 16 * _CHUNK), offset)
        finally:
            os.close(fd)
        self._offsets[path] = offset + len(chunk)
        data = self._partial.get(path, b"") + chunk
        *lines, rest = data.split(b"\n")
        self._partial[path] = rest[-_CHUNK:]
        for raw in lines:
            event = self._parser.parse(raw.decode("utf-8", errors="replace"))
            if event is not None and event.kind is ProgressKind.STEP and event.step is not None:
                self.highest = event.step if self.highest is None else max(self.highest, event.step)
