"""Format checks of shard files, read through the filesystem seam within fixed bounds.

Layouts call these after a file passed the cheap checks (present, non-empty): a safetensors file
must be exactly as long as its header says, a torch.save zip must end with its end records, and
every DCP shard must reach the end of the last byte range `.metadata` records for it. Each check
reads a header, a tail or a metadata file, never a shard's data, and counts what it read on the
`Tally`, so every checkpoint reports its cost (files and bytes read). A file goodput may not read
(permissions, a refusal) is *unverified*, said in the checkpoint, not held against it: the cheap
checks still apply. goodput.checkpoints.formats holds the pure format rules.
"""

from __future__ import annotations

from typing import Any

from goodput.checkpoints.formats import (
    PICKLE_MAGIC,
    ZIP_MAGIC,
    ZIP_TAIL,
    FormatError,
    ZipDirectory,
    dcp_storage_ends,
    local_data_offset,
    pickle_top_level,
    safetensors_expected_size,
    safetensors_header_length,
    zip_directory,
    zip_members,
)
from goodput.checkpoints.fs import RANGE_LIMIT, BudgetExhaustedError, Entry, FileSystem, RefusedError, join
from goodput.checkpoints.scan import Tally, os_reason, printable

# A torch.save data.pkl holds the object tree with tensors as references: small next to the data.
PICKLE_LIMIT = 16 * 1024 * 1024
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
SHORT_ZIP_TAIL = 1024


class _Unread(Exception):
    """A read goodput was not allowed or able to make; the check is skipped, not failed."""


def _read(fs: FileSystem, path: str, offset: int, length: int, tally: Tally) -> bytes:
    try:
        data = fs.read_range(path, offset, length)
    except BudgetExhaustedError:
        raise
    except RefusedError as error:
        raise _Unread(str(error)) from None
    except OSError as error:
        raise _Unread(os_reason(error)) from None
    tally.read(path, len(data))
    return data


def verify_file(fs: FileSystem, path: str, entry: Entry, what: str, tally: Tally) -> ZipDirectory | None:
    """Checks one shard by its suffix (safetensors or torch.save); other files are left alone.
    For a whole torch zip, returns where its central directory lies (for `torch_file_fields`)."""
    try:
        if entry.name.endswith(".safetensors"):
            _safetensors(fs, path, entry.size, tally)
        elif entry.name.endswith(TORCH_SUFFIXES):
            return _torch_zip(fs, path, entry.size, tally)
    except FormatError as error:
        tally.problem(f"{what}: {error}")
    except _Unread as why:
        tally.unverified.append(f"{what}: not read ({printable(str(why), 120)})")
    return None


def _safetensors(fs: FileSystem, path: str, size: int, tally: Tally) -> None:
    length = safetensors_header_length(_read(fs, path, 0, 8, tally), size)
    if length > RANGE_LIMIT:
        raise _Unread(f"its {length}-byte header is over the {RANGE_LIMIT}-byte read limit")
    expected = safetensors_expected_size(_read(fs, path, 8, length, tally), length)
    if size < expected:
        raise FormatError(f"truncated: its header describes {expected} bytes, the file has {size}")
    if size > expected:
        raise FormatError(f"{size} bytes, longer than the {expected} its header describes: safetensors "
                          "refuses to load it")


def _zip_directory(fs: FileSystem, path: str, size: int, tally: Tally) -> ZipDirectory:
    """The end records from a short tail (torch writes no archive comment, so they are the last
    98 bytes); only when that fails, from the longest tail a comment allows."""
    short = min(size, SHORT_ZIP_TAIL)
    try:
        return zip_directory(_read(fs, path, size - short, short, tally), size)
    except FormatError:
        if short == size:
            raise
    tail_length = min(size, ZIP_TAIL)
    return zip_directory(_read(fs, path, size - tail_length, tail_length, tally), size)


def _torch_zip(fs: FileSystem, path: str, size: int, tally: Tally) -> ZipDirectory | None:
    head = _read(fs, path, 0, 4, tally)
    if head.startswith(ZIP_MAGIC):
        return _zip_directory(fs, path, size, tally)
    if head.startswith(PICKLE_MAGIC):
        tally.unverified.append(f"{printable(path.rsplit('/', 1)[-1], 80)}: a legacy (non-zip) torch file, "
                                "whose length is not recorded")
        return None
    raise FormatError("neither a zip archive nor a pickle: not a torch.save file (zeros, or overwritten)")


def torch_file_fields(fs: FileSystem, path: str, where: ZipDirectory, what: str, tally: Tally) -> dict[str, Any] | None:
    """The top-level dict a torch.save file holds (string keys; tensors as references), read from
    its `data.pkl` without unpickling, given where `verify_file` found its central directory; None,
    with the reason recorded, if not read."""
    try:
        if where.size > RANGE_LIMIT:
            raise _Unread(f"its zip directory is over {RANGE_LIMIT} bytes")
        members = zip_members(_read(fs, path, where.offset, where.size, tally))
        pickled = next((m for m in members if m.name.endswith("data.pkl")), None)
        if pickled is None or pickled.method != 0 or pickled.size > PICKLE_LIMIT:
            raise _Unread("no stored data.pkl within the read limit")
        if pickled.offset + 30 + pickled.size > where.offset:
            raise FormatError(f"its {pickled.name[:60]!r} lies past its zip central directory: damaged")
        start = local_data_offset(_read(fs, path, pickled.offset, 30, tally), pickled)
        if start + pickled.size > where.offset:
            raise FormatError(f"its {pickled.name[:60]!r} runs into its zip central directory: damaged")
        return pickle_top_level(_read(fs, path, start, pickled.size, tally))
    except FormatError as error:
        tally.problem(f"{what}: {error}")
    except _Unread as why:
        tally.unverified.append(f"{what}: not read ({printable(str(why), 120)})")
    return None


def verify_dcp(fs: FileSystem, directory: str, names: dict[str, Entry], tally: Tally, prefix: str = "") -> None:
    """Every shard DCP's `.metadata` names exists and is as long as its last recorded byte range."""
    metadata = names.get(".metadata")
    if metadata is None or metadata.is_dir or metadata.refused or metadata.size == 0:
        return  # the listing checks already said what is wrong with it
    try:
        if metadata.size > RANGE_LIMIT:
            raise _Unread(f"{metadata.size} bytes, over the {RANGE_LIMIT}-byte read limit")
        ends = dcp_storage_ends(_read(fs, join(directory, ".metadata"), 0, metadata.size, tally))
    except FormatError as error:
        tally.problem(f"{prefix}.metadata: {error}")
        return
    except _Unread as why:
        tally.unverified.append(f"{prefix}.metadata: not read ({printable(str(why), 120)})")
        return
    for relative, end in sorted(ends.items()):
        shard = names.get(relative)
        if shard is None or shard.refused or shard.is_dir:
            tally.problem(f"shard {prefix}{relative}, named in .metadata, is missing"
                          + (f" ({shard.refused})" if shard is not None and shard.refused else ""))
        elif shard.size < end:
            tally.problem(f"shard {prefix}{relative} is truncated: .metadata records bytes up to {end}, "
                          f"the file has {shard.size}")
