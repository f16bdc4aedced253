"""Files goodput trusts because of who owns them: the secrets it keeps, and the configuration and
data directory it is pointed at.

A secret goodput generated for itself (the resubmit key, the console's session key and embedded
admin token, all under `data_dir`) is used only as goodput left it: a regular file of this user's,
readable by no one else, reached without a symbolic link. Whoever planted a session key could sign
an admin cookie; whoever planted a token knows the password. A FIFO in its place must not hang the
start (O_NONBLOCK), and a link must not lead the read elsewhere (O_NOFOLLOW).

Configuration and the data directory are not secret, but whoever can write them chooses where
goodput sends its credentials (a Temporal API key to their own address): they must belong to this
user or root and be writable by no one else. Group-writable passes only for this process's own
group (a user-private group, a Kubernetes fsGroup): membership of a shared group is the site's
choice, and a volume's group bit is how Kubernetes grants the pod its data directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class PrivateFileError(ValueError):
    """A private file or trusted path that someone else could have chosen; the message names the
    path and why, never the content."""


def read_private(path: Path, *, max_bytes: int = 4096) -> bytes:
    """The content of a 0600 regular file of this user's, stripped; refused otherwise."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise PrivateFileError(f"{path} is a symbolic link; it must be a regular file of this user's, "
                                   "mode 0600") from None
        raise PrivateFileError(f"{path} cannot be read: {err.strerror}") from None
    with os.fdopen(fd, "rb") as stored:
        info = os.fstat(stored.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise PrivateFileError(f"{path} is not a regular file; it must be a regular file of this user's, "
                                   "mode 0600")
        if info.st_uid != os.geteuid():
            raise PrivateFileError(f"{path} is owned by uid {info.st_uid}, not by this user "
                                   f"(uid {os.geteuid()}); it must be this user's, mode 0600")
        if info.st_mode & 0o077:
            raise PrivateFileError(f"{path} has mode {stat.S_IMODE(info.st_mode):04o}; it must be mode 0600")
        return stored.read(max_bytes).strip()


def create_private(path: Path, content: bytes) -> None:
    """Written aside, then linked into place: concurrent starters agree on the first content, and
    a file already there (planted or not) is never overwritten."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def private_secret(path: Path, make: Callable[[], bytes], *, max_bytes: int = 4096) -> bytes:
    """The secret kept in `path`, generated with `make` when there is none yet."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not os.path.lexists(path):
        create_private(path, make())
    return read_private(path, max_bytes=max_bytes)


def writable_by_others(info: os.stat_result) -> bool:
    return bool(info.st_mode & stat.S_IWOTH) or (bool(info.st_mode & stat.S_IWGRP)
                                                and info.st_gid != os.getegid())


def check_trusted(path: Path, what: str, *, directory: bool = False, others_may_write: bool = False) -> None:
    """`path` (followed if a link: an operator may link /etc/goodput into place) belongs to this
    user or root and, unless `others_may_write`, no one else can write it; `what` names it in the
    error ("config file")."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise PrivateFileError(f"{what} {path} cannot be read: {err.strerror}") from None
    kind_ok = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    if not kind_ok:
        raise PrivateFileError(f"{what} {path} is not a {'directory' if directory else 'regular file'}")
    if info.st_uid not in (os.geteuid(), 0):
        raise PrivateFileError(f"{what} {path} is owned by uid {info.st_uid}, not by this user "
                               f"(uid {os.geteuid()}) or root: refused")
    if writable_by_others(info) and not others_may_write:
        raise PrivateFileError(f"{what} {path} has mode {stat.S_IMODE(info.st_mode):04o}: others can write it; "
                               f"chmod go-w {path}")


def check_parent(path: Path, what: str) -> None:
    """The directory holding `path` must not let others swap it: this user's or root's and not
    writable by others, unless sticky (/tmp: others cannot rename what is ours)."""
    parent = path.absolute().parent
    try:
        info = os.stat(parent)
    except OSError as err:
        raise PrivateFileError(f"the directory of {what} {path} cannot be read: {err.strerror}") from None
    sticky = bool(info.st_mode & stat.S_ISVTX)
    if info.st_uid not in (os.geteuid(), 0) or (writable_by_others(info) and not sticky):
        raise PrivateFileError(f"{what} {path} is in {parent}, which another user owns or can write: refused")
