"""The filesystem seam checkpoint discovery reads through: list, stat, and read small text.

Checkpoints are multi-terabyte trees on parallel filesystems, so discovery may only look at
directory listings, sizes and mtimes, and read a few small metadata or marker files. This
Protocol is all it can see, which makes that rule enforceable: `LocalFileSystem` is the real
thing, `goodput.fakes.filesystem.FakeFileSystem` the in-memory one tests use (and it refuses to
read shards or anything larger than the limit it is given).
"""

from __future__ import annotations

import os
import posixpath
import stat as stat_mode
from dataclasses import dataclass
from typing import Protocol

SMALL_TEXT_LIMIT = 64 * 1024
# trainer_state.json and *.index.json grow with the run and the model; still metadata, never shards.
METADATA_LIMIT = 8 * 1024 * 1024

# Files that hold tensors. Discovery stats them and never opens them.
SHARD_SUFFIXES = (".distcp", ".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npy", ".h5", ".msgpack")


class TooLargeError(ValueError):
    """A file asked for as small text is bigger than the limit; nothing was read."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry: its name (not its path), kind, size in bytes and mtime (epoch s)."""

    name: str
    is_dir: bool
    size: int
    mtime: float


class FileSystem(Protocol):
    def list_dir(self, path: str) -> list[Entry]:
        """The entries of a directory, sorted by name; [] when it does not exist or is no directory."""
        ...

    def stat(self, path: str) -> Entry | None:
        """The entry at `path` (symlinks followed), or None when nothing is there."""
        ...

    def read_small_text(self, path: str, limit: int = SMALL_TEXT_LIMIT) -> str:
        """The UTF-8 text of a small file. Raises FileNotFoundError, or TooLargeError over `limit`."""
        ...


def join(*parts: str) -> str:
    """Paths are POSIX: checkpoints live on Linux cluster filesystems."""
    return posixpath.join(*parts)


def is_shard_name(name: str) -> bool:
    return name.endswith(SHARD_SUFFIXES)


class LocalFileSystem:
    """The real filesystem through os.scandir and os.stat; never opens a file above the limit."""

    def list_dir(self, path: str) -> list[Entry]:
        entries: list[Entry] = []
        try:
            with os.scandir(path) as it:
                for item in it:
                    try:
                        st = item.stat()  # follows symlinks, like `stat`
                    except FileNotFoundError:
                        continue  # removed (or a dangling link) between listing and stat
                    entries.append(Entry(name=item.name, is_dir=stat_mode.S_ISDIR(st.st_mode),
                                         size=st.st_size, mtime=st.st_mtime))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(entries, key=lambda e: e.name)

    def stat(self, path: str) -> Entry | None:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Entry(name=posixpath.basename(path.rstrip("/")), is_dir=stat_mode.S_ISDIR(st.st_mode),
                     size=st.st_size, mtime=st.st_mtime)

    def read_small_text(self, path: str, limit: int = SMALL_TEXT_LIMIT) -> str:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise TooLargeError(f"{path} is {size} bytes, over the {limit}-byte limit")
            data = handle.read(limit + 1)
        if len(data) > limit:  # grew while we looked
            raise TooLargeError(f"{path} is over the {limit}-byte limit")
        return data.decode("utf-8", errors="replace")
