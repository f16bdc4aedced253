"""Shared building blocks of the layout plugins: step numbers, in-progress names, and a tally.

Every layout checks the same things in the end (entries present, non-empty, not mid-write), so
the rules live here once: a plugin lists a directory, feeds entries to a `Tally`, and turns it
into a `Checkpoint` whose problems say exactly what was wrong.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from goodput.checkpoints.fs import METADATA_LIMIT, Entry, FileSystem, TooLargeError
from goodput.checkpoints.model import Checkpoint

# Atomic-rename and marker conventions for "still being written".
_TEMP_SUFFIXES = (".tmp", "-tmp", "_tmp", ".partial", "-partial", ".incomplete", "-incomplete", ".inprogress",
                  "-unfinished", ".writing")
_TEMP_PREFIXES = ("tmp-", "tmp_", ".tmp", "tmp.", ".partial")

_STEP_PATTERNS = (
    re.compile(r"global_step[_-]?(\d+)"),
    re.compile(r"(?:^|[^a-z])(?:step|iter|iteration|checkpoint|ckpt)[=_-]?(\d+)", re.IGNORECASE),
    re.compile(r"(\d+)(?!.*\d)"),  # the last number in the name
)


def temp_reason(name: str) -> str | None:
    """Why a name looks like a checkpoint still being written (atomic rename not done), or None."""
    lower = name.lower()
    for suffix in _TEMP_SUFFIXES:
        if lower.endswith(suffix):
            return f"name ends with {suffix!r}: still being written (or abandoned) before its atomic rename"
    for prefix in _TEMP_PREFIXES:
        if lower.startswith(prefix):
            return f"name starts with {prefix!r}: still being written (or abandoned) before its atomic rename"
    return None


def strip_temp(name: str) -> str:
    lower = name.lower()
    for suffix in _TEMP_SUFFIXES:
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    for prefix in _TEMP_PREFIXES:
        if lower.startswith(prefix):
            return name[len(prefix):]
    return name


def step_from_name(name: str) -> int | None:
    """The training step a checkpoint directory's name carries (`step-500`, `global_step500`,
    `checkpoint_500`, `iter_0000500`, `epoch=1-step=500`), or None."""
    base = strip_temp(name)
    for pattern in _STEP_PATTERNS:
        match = pattern.search(base)
        if match:
            return int(match.group(1))
    return None


def to_datetime(mtime: float) -> datetime:
    return datetime.fromtimestamp(mtime, UTC)


@dataclass
class Tally:
    """What one checkpoint's validation saw: files, bytes, the newest mtime and the problems.

    Entries are counted once by key, their path relative to the checkpoint (default: the name).
    """

    files: int = 0
    bytes: int = 0
    newest: float | None = None
    problems: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def see(self, entry: Entry, key: str | None = None) -> None:
        key = entry.name if key is None else key
        if key in self.seen:
            return
        self.seen.add(key)
        self.newest = entry.mtime if self.newest is None else max(self.newest, entry.mtime)
        if not entry.is_dir:
            self.files += 1
            self.bytes += entry.size

    def see_all(self, entries: list[Entry], prefix: str = "") -> None:
        for entry in entries:
            self.see(entry, f"{prefix}{entry.name}")

    def nonempty(self, entry: Entry | None, what: str, key: str | None = None) -> bool:
        """Records a problem unless `entry` is a non-empty file; True when it is."""
        if entry is None:
            self.problems.append(f"{what} is missing")
            return False
        self.see(entry, key)
        if entry.is_dir:
            self.problems.append(f"{what} is a directory, expected a file")
            return False
        if entry.size == 0:
            self.problems.append(f"{what} is empty (0 bytes): truncated or never written")
            return False
        return True

    def build(self, *, path: str, step: int, layout: str, tag: str = "", pointer: bool = False) -> Checkpoint:
        return Checkpoint(path=path, step=step, layout=layout, tag=tag, files_checked=self.files,
                          total_bytes=self.bytes, mtime=None if self.newest is None else to_datetime(self.newest),
                          complete=not self.problems, problems=tuple(self.problems), pointer=pointer)


def read_json(fs: FileSystem, path: str, what: str, tally: Tally, limit: int = METADATA_LIMIT) -> Any:
    """Parsed JSON of a metadata file, or None with the reason recorded in the tally."""
    try:
        text = fs.read_small_text(path, limit)
    except FileNotFoundError:
        tally.problems.append(f"{what} is missing")
        return None
    except TooLargeError:
        tally.problems.append(f"{what} is larger than {limit} bytes; not parsed")
        return None
    try:
        return json.loads(text)
    except ValueError as error:
        tally.problems.append(f"{what} does not parse as JSON ({error})")
        return None


def by_name(entries: list[Entry]) -> dict[str, Entry]:
    return {entry.name: entry for entry in entries}
