"""The real filesystem for checkpoint discovery, confined to the checkpoint root and bounded.

A checkpoint tree belongs to the job's owner, who may plant anything in it: `latest` as a FIFO
(open() would block forever), as a symlink to /etc/shadow, a directory symlinked to a root-only
directory, a million entries. So every path below the root is resolved here one component at a
time from a file descriptor of the root (`openat` with O_NOFOLLOW), never by the kernel's own
path walk: a symbolic link is followed only when its target stays inside the root (then it is
resolved the same way, at most MAX_SYMLINK_HOPS of them), and `..` never climbs above the root.
In-root links are followed because frameworks and users make them (a `latest` link to the newest
step, NeMo's `-last` links, shards linked from a sibling step) and the owner could as well have
copied the files; links out of the root are refused, whoever runs discovery. Files are opened
only when they are regular files: lstat first, then O_NOFOLLOW | O_NONBLOCK (a FIFO swapped in
between is opened without blocking and refused on fstat), and the file read must be the one
that was checked (same device and inode). Directory listings are bounded per directory, and
each view (`within`) carries a budget of entries and wall-clock seconds for one discovery.

The root path itself is opened as given (the job chose it; its owner's permissions apply when
discovery runs as the owner, see goodput.checkpoints.finder).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat as st
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from goodput.checkpoints.fs import (
    RANGE_LIMIT,
    SMALL_TEXT_LIMIT,
    BudgetExhaustedError,
    Entry,
    FileSystem,
    NotRegularFileError,
    OutsideRootError,
    RefusedError,
    TooLargeError,
    TooManyEntriesError,
    within_root,
)
from goodput.checkpoints.model import ScanLimits

MAX_SYMLINK_HOPS = 40
# Components one resolution may walk, links expanded: `a/../a/../…` targets cost syscalls too.
MAX_COMPONENTS = 1024
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_WALK_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def describe_mode(mode: int) -> str:
    kinds = ((st.S_ISFIFO, "a FIFO"), (st.S_ISSOCK, "a socket"), (st.S_ISCHR, "a character device"),
             (st.S_ISBLK, "a block device"), (st.S_ISDIR, "a directory"), (st.S_ISLNK, "a symbolic link"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _display_name(name: str) -> tuple[str, str]:
    """The name as text, and why it is refused when it is not UTF-8 (its bytes escaped)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"), \
            "its name is not valid UTF-8"
    return name, ""


class _Budget:
    """Entries and operations one discovery may spend, and its wall-clock allowance."""

    def __init__(self, limits: ScanLimits) -> None:
        self.limits = limits
        self.spent = 0
        self.started = time.monotonic()

    def charge(self, units: int = 1) -> None:
        self.spent += units
        if self.spent > self.limits.max_entries_total:
            raise BudgetExhaustedError(f"looked at more than {self.limits.max_entries_total} entries under "
                                       "the root; stopped")
        if time.monotonic() - self.started > self.limits.max_seconds:
            raise BudgetExhaustedError(f"took longer than {self.limits.max_seconds:g} s; stopped")


class LocalFileSystem:
    """The real filesystem, confined to `root` (default `/`) and bounded by `limits`."""

    def __init__(self, root: str = "/", limits: ScanLimits | None = None) -> None:
        if not root.startswith("/") or "\0" in root:
            raise OutsideRootError(f"{root[:80]!r} is not an absolute path")
        self._root = posixpath.normpath(root) if root != "/" else "/"
        self._root_parts = [p for p in self._root.split("/") if p]
        self._limits = limits or ScanLimits()
        self._budget = _Budget(self._limits)
        self._real_root: str | None = None

    def within(self, root: str) -> FileSystem:
        if "\0" in root or not within_root(posixpath.normpath(root), self._root):
            raise OutsideRootError(f"{root[:200]} is outside {self._root}")
        return LocalFileSystem(root, self._limits)

    # path handling ----------------------------------------------------------------------------

    def _below_root(self, path: str) -> list[str]:
        """The components of `path` below the root; refuses paths outside it or climbing with `..`."""
        if "\0" in path:
            raise RefusedError("a path with a NUL byte")
        parts = [p for p in path.split("/") if p and p != "."]
        if ".." in parts:
            raise OutsideRootError(f"{path[:200]} climbs with '..'")
        if not path.startswith("/") or parts[: len(self._root_parts)] != self._root_parts:
            raise OutsideRootError(f"{path[:200]} is outside the checkpoint root {self._root}")
        below = parts[len(self._root_parts):]
        if len(below) > self._limits.max_depth:
            raise RefusedError(f"more than {self._limits.max_depth} directory levels below the root")
        return below

    def _target_below_root(self, target: str) -> list[str]:
        """An absolute symlink target as components below the root, or OutsideRootError."""
        parts = [p for p in target.split("/") if p and p != "."]
        if self._real_root is None:
            self._real_root = os.path.realpath(self._root)
        for root in (self._root_parts, [p for p in self._real_root.split("/") if p]):
            if parts[: len(root)] == root:
                return parts[len(root):]
        raise OutsideRootError("a symbolic link leading out of the checkpoint root; not followed")

    def _link_parts(self, name: str, fds: list[int]) -> list[str]:
        """Symlink `name`'s target as components to walk next; an absolute target restarts the
        walk at the root (`fds` keeps only the root's descriptor), confined to it."""
        target = os.readlink(name, dir_fd=fds[-1])
        if not target.startswith("/"):
            return target.split("/")
        parts = self._target_below_root(target)
        for fd in fds[1:]:
            os.close(fd)
        del fds[1:]
        return parts

    @contextmanager
    def _resolved(self, below: list[str]) -> Iterator[tuple[int, str | None, os.stat_result]]:
        """Walks `below` from the root: yields (fd of the parent directory, final name, its lstat),
        or (fd of the directory, None, its fstat) when the path resolves to a directory on the way.
        Every intermediate component is a real directory opened O_NOFOLLOW; links are expanded
        here, confined to the root."""
        fds: list[int] = []
        try:
            fds.append(os.open(self._root, _PATH_FLAGS))
            pending = deque(below)
            hops = 0
            walked = 0
            while pending:
                name = pending.popleft()
                walked += 1
                if walked > MAX_COMPONENTS:
                    raise RefusedError(f"symbolic links expand to more than {MAX_COMPONENTS} path components")
                self._budget.charge()
                if name in ("", "."):
                    continue
                if name == "..":
                    if len(fds) == 1:
                        raise OutsideRootError("a symbolic link climbs out of the checkpoint root; not followed")
                    os.close(fds.pop())
                    continue
                info = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
                if st.S_ISLNK(info.st_mode):
                    hops += 1
                    if hops > MAX_SYMLINK_HOPS:
                        raise RefusedError(f"more than {MAX_SYMLINK_HOPS} symbolic links on the way")
                    pending.extendleft(reversed(self._link_parts(name, fds)))
                    continue
                if not pending:
                    yield fds[-1], name, info
                    return
                if not st.S_ISDIR(info.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "Not a directory", name)
                if len(fds) > self._limits.max_depth:
                    raise RefusedError(f"more than {self._limits.max_depth} directory levels below the root")
                fds.append(os.open(name, _WALK_FLAGS, dir_fd=fds[-1]))
            yield fds[-1], None, os.fstat(fds[-1])
        except OSError as error:
            if error.errno == errno.ELOOP:  # a component became a symlink between lstat and open
                raise RefusedError("changed into a symbolic link while being looked at") from None
            raise
        finally:
            for fd in fds:
                os.close(fd)

    # the FileSystem protocol --------------------------------------------------------------------

    def _entry(self, name: str, info: os.stat_result) -> Entry:
        if st.S_ISDIR(info.st_mode):
            return Entry(name=name, is_dir=True, size=info.st_size, mtime=info.st_mtime)
        if st.S_ISREG(info.st_mode):
            return Entry(name=name, is_dir=False, size=info.st_size, mtime=info.st_mtime)
        return Entry(name=name, is_dir=False, size=0, mtime=info.st_mtime,
                     refused=f"{describe_mode(info.st_mode)}, not a regular file")

    def stat(self, path: str) -> Entry | None:
        below = self._below_root(path)
        self._budget.charge()
        try:
            with self._resolved(below) as (_, _name, info):
                return self._entry(posixpath.basename(path.rstrip("/")) or "/", info)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _listed(self, below: list[str], name: str, link: os.stat_result) -> Entry:
        """One directory entry; a symlink is described by what it leads to inside the root."""
        shown, bad_name = _display_name(name)
        if bad_name:
            return Entry(name=shown, is_dir=False, size=0, mtime=link.st_mtime, refused=bad_name)
        if not st.S_ISLNK(link.st_mode):
            return self._entry(name, link)
        try:
            with self._resolved([*below, name]) as (_, _final, info):
                return self._entry(name, info)
        except (FileNotFoundError, NotADirectoryError):
            return Entry(name=name, is_dir=False, size=0, mtime=link.st_mtime, refused="a dangling symbolic link")
        except BudgetExhaustedError:
            raise
        except RefusedError as error:
            return Entry(name=name, is_dir=False, size=0, mtime=link.st_mtime, refused=str(error))
        except OSError as error:
            return Entry(name=name, is_dir=False, size=0, mtime=link.st_mtime,
                         refused=f"a symbolic link that cannot be followed ({error.strerror})")

    def list_dir(self, path: str) -> list[Entry]:
        below = self._below_root(path)
        self._budget.charge()
        try:
            with self._resolved(below) as (parent, name, _info):
                fd = os.open(name or ".", _LIST_FLAGS, dir_fd=parent)
        except (FileNotFoundError, NotADirectoryError):
            return []
        entries: list[Entry] = []
        limit = self._limits.max_entries_per_dir
        try:
            with os.scandir(fd) as items:
                for item in items:
                    if len(entries) >= limit:
                        raise TooManyEntriesError(f"{path[:200]} holds more than {limit} entries; not judged")
                    self._budget.charge()
                    try:
                        link = item.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed between listing and stat
                    entries.append(self._listed(below, item.name, link))
        finally:
            os.close(fd)
        return sorted(entries, key=lambda e: e.name)

    @contextmanager
    def _opened(self, path: str) -> Iterator[tuple[int, os.stat_result]]:
        """A descriptor of the regular file at `path`, opened without following a final link or
        blocking on a FIFO, and checked to be the file that was looked at."""
        below = self._below_root(path)
        self._budget.charge()
        with self._resolved(below) as (parent, name, info):
            if name is None or not st.S_ISREG(info.st_mode):
                raise NotRegularFileError(f"{describe_mode(info.st_mode)}, not a regular file")
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=parent)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise RefusedError("changed into a symbolic link while being looked at") from None
                raise
        try:
            opened = os.fstat(fd)
            if not st.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                raise RefusedError("changed while being read; not read")
            yield fd, info
        finally:
            os.close(fd)

    def read_small_text(self, path: str, limit: int = SMALL_TEXT_LIMIT) -> str:
        with self._opened(path) as (fd, info):
            if info.st_size > limit:
                raise TooLargeError(f"{path} is {info.st_size} bytes, over the {limit}-byte limit")
            data = _read_at(fd, 0, limit + 1)
        if len(data) > limit:  # grew while we looked
            raise TooLargeError(f"{path} is over the {limit}-byte limit")
        return data.decode("utf-8", errors="replace")

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        if length > RANGE_LIMIT:
            raise TooLargeError(f"asked for {length} bytes of {path}, over the {RANGE_LIMIT}-byte range limit")
        if not (0 <= offset < 1 << 62) or length < 0:
            raise RefusedError(f"an offset or length out of range ({offset}, {length})")
        with self._opened(path) as (fd, _info):
            return _read_at(fd, offset, length)


def _read_at(fd: int, offset: int, length: int) -> bytes:
    chunks: list[bytes] = []
    remaining = length
    while remaining > 0:
        chunk = os.pread(fd, min(remaining, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)
