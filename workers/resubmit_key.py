"""The secret behind goodput's resubmission tokens, from settings or from the data directory.

A resubmitted copy is recognised by a token only goodput can mint (`goodput.slurm.resubmit`), so
the key must never be printed and every worker of a deployment must hold the same one: a real
deployment sets `resubmit_key`. `goodput up` (one process) and a lone worker may leave it unset;
then a random key is generated once and kept in `<data_dir>/resubmit.key`, readable by its owner
only, so restarts keep recognising copies made before them.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from goodput.config import Settings
from goodput.private_files import PrivateFileError, private_secret
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
    try:
        secret = private_secret(path, lambda: (secrets.token_hex(32) + "\n").encode(), max_bytes=MAX_KEY_FILE)
    except PrivateFileError as err:
        raise ResubmitKeyError(str(err)) from None
    if len(secret) < MIN_SECRET_BYTES:
        raise ResubmitKeyError(f"{path} holds no usable key; delete it to have a new one generated")
    return secret
