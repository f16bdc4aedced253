"""The filesystem seam checkpoint discovery reads through: list, stat, read small text or a byte
range, confine.

Checkpoints are multi-terabyte trees on parallel filesystems, so discovery may only look at
directory listings, sizes and mtimes, read a few small metadata or marker files, and read bounded
byte ranges of shards (a header, a tail) to check that a file is as long as its format says. The tree
belongs to the job's owner, so everything in it is untrusted: a name, a size, a symlink, a FIFO
where a pointer file should be. This Protocol is all discovery can see, which makes both rules
enforceable: `LocalFileSystem` (goodput.checkpoints.localfs) is the real thing, confined to the
checkpoint root and bounded; `tests.fakes.filesystem.FakeFileSystem` the in-memory one tests
use (it refuses to read shards or anything larger than the limit it is given).

Every refusal is a `RefusedError` with a message a person can act on; discovery turns it into a
problem of the checkpoint (or of the root), never into an escaping exception.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Protocol

SMALL_TEXT_LIMIT = 64 * 1024
# trainer_state.json and *.index.json grow with the run and the model; still metadata, never shards.
METADATA_LIMIT = 8 * 1024 * 1024

# One byte-range read of a shard (a safetensors header, a zip's central directory, a DCP
# `.metadata`) is at most this: a check reads headers and tails, never a shard's data.
RANGE_LIMIT = 64 * 1024 * 1024

# Files that hold tensors. Discovery stats them and reads at most bounded headers and tails.
SHARD_SUFFIXES = (".distcp", ".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npy", ".h5", ".msgpack")


class RefusedError(ValueError):
    """Discovery refused to look at something in the tree; the message says what and why."""


class TooLargeError(RefusedError):
    """A file asked for as small text is bigger than the limit; nothing was read."""


class NotRegularFileError(RefusedError):
    """A FIFO, socket, device or directory where a file was to be read; it was not opened."""


class OutsideRootError(RefusedError):
    """A path, or a symbolic link on the way to it, leads out of the checkpoint root."""


class TooManyEntriesError(RefusedError):
    """One directory holds more entries than discovery lists; that directory is not judged."""


class BudgetExhaustedError(RefusedError):
    """Discovery under this root looked at too many entries or ran too long, and stopped."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry: its name (not its path), kind, size in bytes and mtime (epoch s).

    `refused` is non-empty for an entry discovery will not follow or open (a FIFO, a device, a
    symlink leading out of the root, a dangling link, a name that is not UTF-8): it says why, it
    is never a directory and its size does not count.
    """

    name: str
    is_dir: bool
    size: int
    mtime: float
    refused: str = ""


class FileSystem(Protocol):
    """What checkpoint discovery reads through: listings, stats and bounded reads, confined to a root."""
    def within(self, root: str) -> FileSystem:
        """This filesystem confined to `root`: a path outside it, or a symlink leading out of it,
        raises OutsideRootError. Discovery calls it once per root; a view may carry per-root
        budgets (entries looked at, time spent)."""
        ...

    def list_dir(self, path: str) -> list[Entry]:
        """The entries of a directory, sorted by name; [] when it does not exist or is no directory."""
        ...

    def stat(self, path: str) -> Entry | None:
        """The entry at `path` (symlinks inside the root followed), or None when nothing is there."""
        ...

    def read_small_text(self, path: str, limit: int = SMALL_TEXT_LIMIT) -> str:
        """The UTF-8 text of a small regular file. Raises FileNotFoundError, TooLargeError over
        `limit`, or another RefusedError (not a regular file, outside the root)."""
        ...

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes of a regular file from `offset` (fewer at its end). Raises
        FileNotFoundError, TooLargeError when `length` is over RANGE_LIMIT, or another
        RefusedError, like `read_small_text`."""
        ...


def join(*parts: str) -> str:
    """Paths are POSIX: checkpoints live on Linux cluster filesystems."""
    return posixpath.join(*parts)


def is_shard_name(name: str) -> bool:
    """Whether `name` ends like a tensor shard (SHARD_SUFFIXES)."""
    return name.endswith(SHARD_SUFFIXES)


def within_root(path: str, root: str) -> bool:
    """Whether `path` is `root` or lexically below it (both absolute, no `..` expected)."""
    root = root.rstrip("/")
    return path == root or path.startswith(root + "/") or root == ""
