"""Reading a resumed job's output for progress past its checkpoint, and where its output ends now.

Verification must not stop at RUNNING: a job that restarts and then dies loading a corrupt
checkpoint, or hangs in NCCL init, is RUNNING for a while. The resumed attempt's lines come after
the output sizes recorded just before the resume (or from the start, if Slurm truncated the file).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from goodput.detect.progress import ProgressKind, ProgressParser

_CHUNK = 1 << 20


def output_sizes(paths: Iterable[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for path in paths:
        try:
            sizes[path] = os.stat(path).st_size
        except OSError:
            sizes[path] = 0  # not created yet: the new attempt starts it
    return sizes


class ProgressReader:
    """Follows files from given offsets and remembers the highest step printed since."""

    def __init__(self, offsets: dict[str, int], parser: ProgressParser | None = None) -> None:
        self._offsets = dict(offsets)
        self._partial: dict[str, bytes] = {}
        self._parser = parser or ProgressParser()
        self.highest: int | None = None

    def poll(self, paths: Iterable[str]) -> int | None:
        for path in paths:
            self._read(path)
        return self.highest

    def _read(self, path: str) -> None:
        try:
            size = os.stat(path).st_size
        except OSError:
            return
        offset = self._offsets.get(path, 0)
        if size < offset:  # truncated: the new attempt rewrote the file
            offset, self._partial[path] = 0, b""
        if size == offset:
            return
        with Path(path).open("rb") as handle:
            handle.seek(offset)
            data = self._partial.get(path, b"") + handle.read(min(size - offset, 16 * _CHUNK))
            self._offsets[path] = handle.tell()
        *lines, rest = data.split(b"\n")
        self._partial[path] = rest[-_CHUNK:]
        for raw in lines:
            event = self._parser.parse(raw.decode("utf-8", errors="replace"))
            if event is not None and event.kind is ProgressKind.STEP and event.step is not None:
                self.highest = event.step if self.highest is None else max(self.highest, event.step)
