"""Shared building blocks of the layout plugins: step numbers, in-progress names, and a tally.

Every layout checks the same things in the end (entries present, non-empty, not mid-write), so
the rules live here once: a plugin lists a directory, feeds entries to a `Tally`, and turns it
into a `Checkpoint` whose problems say exactly what was wrong. Names, sizes and file contents
come from the job owner's tree, so the helpers here also hold the bounds every plugin needs:
step numbers only from short ASCII digit runs, matched with RE2 (linear time), rank gaps found
without materialising a range as large as the biggest number in a name, a capped list of
problems, and refusals (a FIFO, a link out of the root, an unreadable directory) turned into
problems of the checkpoint instead of exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import re2

from goodput.checkpoints.fs import (
    METADATA_LIMIT,
    SMALL_TEXT_LIMIT,
    BudgetExhaustedError,
    Entry,
    FileSystem,
    RefusedError,
    TooLargeError,
)
from goodput.checkpoints.metadata import MetadataError, parse_json, step_number
from goodput.checkpoints.model import MAX_STEP_DIGITS, Checkpoint

# Atomic-rename and marker conventions for "still being written".
_TEMP_SUFFIXES = (".tmp", "-tmp", "_tmp", ".partial", "-partial", ".incomplete", "-incomplete", ".inprogress",
                  "-unfinished", ".writing")
_TEMP_PREFIXES = ("tmp-", "tmp_", ".tmp", "tmp.", ".partial")

_STEP_PATTERNS = (
    re2.compile(r"global_step[_-]?([0-9]+)"),
    re2.compile(r"(?i)(?:^|[^a-z])(?:step|iter|iteration|checkpoint|ckpt)[=_-]?([0-9]+)"),
)
_DIGITS = frozenset("0123456789")
MAX_PROBLEMS = 20
MAX_PROBLEM_CHARS = 300
SHOWN_MISSING = 8


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


def _last_digit_run(name: str) -> str | None:
    end = len(name)
    while end and name[end - 1] not in _DIGITS:
        end -= 1
    start = end
    while start and name[start - 1] in _DIGITS:
        start -= 1
    return name[start:end] or None


def step_from_name(name: str) -> int | None:
    """The training step a checkpoint directory's name carries (`step-500`, `global_step500`,
    `checkpoint_500`, `iter_0000500`, `epoch=1-step=500`, else the last number), or None; a
    number of more than MAX_STEP_DIGITS digits is no step."""
    base = strip_temp(name)
    for pattern in _STEP_PATTERNS:
        match = pattern.search(base)
        if match:
            return step_number(match.group(1))
    return step_number(_last_digit_run(base))


def oversized_number(name: str) -> bool:
    """Whether the name holds a digit run too long to be a step (a hostile or broken name)."""
    run = 0
    for ch in name:
        run = run + 1 if ch in _DIGITS else 0
        if run > MAX_STEP_DIGITS:
            return True
    return False


def first_missing(present: set[int], highest: int, limit: int = SHOWN_MISSING) -> tuple[list[int], int]:
    """The first `limit` of 0..highest absent from `present`, and how many are absent in all.

    Looks at no more than len(present) + limit numbers however large `highest` is: a shard named
    `__99999999_0.distcp` must cost one problem, not a set of a hundred million ranks.
    """
    total = highest + 1 - sum(1 for n in present if 0 <= n <= highest)
    shown: list[int] = []
    number = 0
    while len(shown) < min(limit, total):
        if number not in present:
            shown.append(number)
        number += 1
    return shown, total


def missing_cells(grid: set[tuple[int, int]], rows: int, cols: int,
                  limit: int = SHOWN_MISSING) -> tuple[list[tuple[int, int]], int]:
    """`first_missing` over a rows x cols grid (row-major), with the same bound."""
    total = rows * cols - sum(1 for r, c in grid if r < rows and c < cols)
    shown: list[tuple[int, int]] = []
    for row in range(rows):
        if len(shown) >= min(limit, total):
            break
        for col in range(cols):
            if len(shown) >= min(limit, total):
                break
            if (row, col) not in grid:
                shown.append((row, col))
    return shown, total


def to_datetime(mtime: float) -> datetime:
    try:
        return datetime.fromtimestamp(mtime, UTC)
    except (OverflowError, OSError, ValueError):  # a file dated before 1 AD or after 9999
        return datetime.max.replace(tzinfo=UTC) if mtime > 0 else datetime.min.replace(tzinfo=UTC)


def printable(text: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    """Untrusted names inside a message, made one printable line of bounded length."""
    shown = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return shown + ("…" if len(text) > limit else "")


def os_reason(error: OSError) -> str:
    return error.strerror or type(error).__name__


@dataclass
class Tally:
    """What one checkpoint's validation saw: files, bytes, the newest mtime and the problems.

    Entries are counted once by key, their path relative to the checkpoint (default: the name).
    At most MAX_PROBLEMS problems are kept; the rest are counted.
    """

    files: int = 0
    bytes: int = 0
    newest: float | None = None
    problems: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    dropped: int = 0
    # What validating it cost beyond listings: the files opened and the bytes read from them.
    opened: set[str] = field(default_factory=set)
    bytes_read: int = 0
    # Checks that could not be made (a file goodput may not read): said, not held against it.
    unverified: list[str] = field(default_factory=list)

    def read(self, path: str, length: int) -> None:
        self.opened.add(path)
        self.bytes_read += length

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)
        else:
            self.dropped += 1

    def see(self, entry: Entry, key: str | None = None) -> None:
        key = entry.name if key is None else key
        if key in self.seen or entry.refused:
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
            self.problem(f"{what} is missing")
            return False
        if entry.refused:
            self.problem(f"{what}: {entry.refused}")
            return False
        self.see(entry, key)
        if entry.is_dir:
            self.problem(f"{what} is a directory, expected a file")
            return False
        if entry.size == 0:
            self.problem(f"{what} is empty (0 bytes): truncated or never written")
            return False
        return True

    def build(self, *, path: str, step: int, layout: str, tag: str = "", pointer: bool = False) -> Checkpoint:
        problems = [printable(p) for p in self.problems]
        if self.dropped:
            problems.append(f"… and {self.dropped} more problems")
        if "," in path or not path.isprintable():
            problems.append("its path holds a comma or a non-printable character, which cannot be passed "
                            "to a resubmitted job (GOODPUT_RESUME_FROM)")
        return Checkpoint(path=path, step=step, layout=layout, tag=tag, files_checked=self.files,
                          total_bytes=self.bytes, mtime=None if self.newest is None else to_datetime(self.newest),
                          complete=not problems, problems=tuple(problems), pointer=pointer,
                          files_read=len(self.opened), bytes_read=self.bytes_read,
                          unverified=tuple(printable(u) for u in self.unverified[:MAX_PROBLEMS]))


@dataclass(frozen=True, slots=True)
class Unread:
    """Why a small file was not read; `missing` when it simply is not there."""

    reason: str
    missing: bool = False


def read_text(fs: FileSystem, path: str, what: str, limit: int = SMALL_TEXT_LIMIT) -> str | Unread:
    """A small file's text, or why not. Only running out of the whole root's budget raises."""
    try:
        return fs.read_small_text(path, limit)
    except (FileNotFoundError, NotADirectoryError):
        return Unread(f"{what} is missing", missing=True)
    except BudgetExhaustedError:
        raise
    except TooLargeError:
        return Unread(f"{what} is larger than {limit} bytes; not read")
    except RefusedError as error:
        return Unread(f"{what} was not read: {error}")
    except OSError as error:
        return Unread(f"{what} is unreadable: {os_reason(error)}")


def read_json(fs: FileSystem, path: str, what: str, tally: Tally, limit: int = METADATA_LIMIT,
              check: Callable[[Any], Any] | None = None) -> Any:
    """Parsed JSON of a metadata file (passed through `check`), or None with the reason recorded."""
    text = read_text(fs, path, what, limit)
    if isinstance(text, Unread):
        tally.problem(text.reason)
        return None
    tally.read(path, len(text.encode("utf-8", "surrogatepass")))
    try:
        data = parse_json(text)
        return check(data) if check is not None else data
    except MetadataError as error:
        tally.problem(f"{what} {error}")
        return None


def listing(fs: FileSystem, path: str, tally: Tally, what: str) -> list[Entry] | None:
    """A directory's entries, or None with the reason recorded when it may not or cannot be listed."""
    try:
        return fs.list_dir(path)
    except BudgetExhaustedError:
        raise
    except RefusedError as error:
        tally.problem(f"{what}: not listed: {error}")
    except OSError as error:
        tally.problem(f"{what}: not listed: {os_reason(error)}")
    return None


def stat_dir(fs: FileSystem, path: str, what: str, missing: str) -> Entry | str:
    """The directory entry at `path`, or why there is none usable: `missing` when nothing is
    there, else what refused it or why it is no directory."""
    try:
        entry = fs.stat(path)
    except BudgetExhaustedError:
        raise
    except RefusedError as error:
        return f"{what}: {error}"
    except OSError as error:
        return f"{what}: {os_reason(error)}"
    if entry is None:
        return missing
    if entry.refused:
        return f"{what}: {entry.refused}"
    if not entry.is_dir:
        return f"{what} is not a directory"
    return entry


def by_name(entries: Iterable[Entry]) -> dict[str, Entry]:
    return {entry.name: entry for entry in entries}
