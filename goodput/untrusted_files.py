"""Opening files a job controls: only its own regular files, never through a symlink, never blocking.

goodput's watchers and verifier read a job's output files with the worker's privileges (root on
many head nodes), but the paths and the files belong to the job's user. Read naively, a job can
point its output at a FIFO (the open blocks the worker forever), or swap the file for a symlink to
a root-only file (whose matching lines would land in incident evidence). The rule here: open
without following a final symlink and without blocking, accept only a regular file, and, when the
job's owner is known, only a file that owner owns (Slurm creates output files as the job's user,
so a root-owned "output" is someone else's file, whatever the path says).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable


class UnsafeFileError(PermissionError):
    """A job-controlled path goodput refuses to read; the message says why."""


_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


def open_job_file(path: str | os.PathLike[str], *, owner_uid: int | None = None,
                  dir_fd: int | None = None) -> int:
    """A read-only descriptor of the regular file at `path` (relative to the directory `dir_fd`
    when given); FileNotFoundError passes through.

    Raises UnsafeFileError for a symlink, a FIFO, a device, a directory or socket, or a file
    not owned by `owner_uid` (when given).
    """
    try:
        fd = os.open(path, _FLAGS, dir_fd=dir_fd)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnsafeFileError(f"{os.fspath(path)} is a symbolic link; job files are read only "
                                  "directly") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(f"{os.fspath(path)} is not a regular file (mode {stat.filemode(st.st_mode)})")
        if owner_uid is not None and st.st_uid != owner_uid:
            raise UnsafeFileError(f"{os.fspath(path)} is owned by uid {st.st_uid}, not by the job's "
                                  f"owner (uid {owner_uid})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def file_size(path: str | os.PathLike[str]) -> int | None:
    """The size of a regular file at `path` without following a symlink; None otherwise."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def file_owners(paths: Iterable[str]) -> dict[str, int]:
    """The owner uid of each path goodput can see (`lstat`: no open, so a FIFO cannot block it);
    paths it cannot see are left out, as nothing is known of their owner."""
    owners: dict[str, int] = {}
    for path in paths:
        try:
            owners[path] = os.lstat(path).st_uid
        except (OSError, ValueError):  # ValueError: a NUL in the path
            continue
    return owners
