"""The secret behind goodput's resubmission tokens, from settings or from the data directory.

A resubmitted copy is recognised by a token only goodput can mint (`goodput.slurm.resubmit`), so
the key must never be printed and every worker of a deployment must hold the same one: a real
deployment sets `resubmit_key`. `goodput up` (one process) and a lone worker may leave it unset;
then a random key is generated once and kept in `<data_dir>/resubmit.key`, readable by its owner
only, so restarts keep recognising copies made before them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from goodput.config import Settings
from goodput.slurm.resubmit import MIN_SECRET_BYTES, ResubmitKey

KEY_FILE = "resubmit.key"
MAX_KEY_FILE = 4096


class ResubmitKeyError(ValueError):
    """The configured or stored key is unusable (too short, or readable by others)."""


def resubmit_key_from(settings: Settings) -> ResubmitKey:
    if settings.resubmit_key is not None:
        secret = settings.resubmit_key.get_secret_value().strip().encode()
        if len(secret) < MIN_SECRET_BYTES:
            raise ResubmitKeyError(f"resubmit_key must be at least {MIN_SECRET_BYTES} characters long")
        return ResubmitKey(secret, settings.cluster)
    return ResubmitKey(_stored_secret(settings.data_dir / KEY_FILE), settings.cluster)


def _stored_secret(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as stored:
        info = os.fstat(stored.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077 or info.st_uid != os.geteuid():
            raise ResubmitKeyError(f"{path} must be a regular file of this user's, mode 0600")
        secret = stored.read(MAX_KEY_FILE).strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise ResubmitKeyError(f"{path} holds no usable key; delete it to have a new one generated")
    return secret


def _create(path: Path) -> None:
    """Written aside, then linked into place: concurrent starters agree on the first key."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
