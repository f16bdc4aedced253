"""How long a checkpoint file must be, from its own format, read from headers and tails only.

A truncated shard (the writer killed mid-write, a full filesystem, a copy cut short) keeps its
name and a plausible size; only zero bytes gave it away before. Each format says its own length:

- **safetensors**: an 8-byte little-endian header length, a JSON header whose `data_offsets` end
  at the data size; the file is exactly `8 + header + data` bytes (safetensors refuses others).
- **torch.save** (`.pt`, `.pth`, `.bin`, `.ckpt`): a zip archive that ends with an
  end-of-central-directory record (ZIP64 records before it); a cut file has no such record at
  its end, and the central directory must lie before it.
- **DCP** `.metadata`: a pickle listing, for every tensor, the shard file and byte range
  (`_StorageInfo(relative_path, offset, length)`); every named file must exist and reach the
  end of its last range. Read with goodput.checkpoints.safepickle, never unpickled.

These functions are pure, over bytes the caller read (goodput.checkpoints.verify does the reading
within bounds); a damaged file is a `FormatError` with a message a person can act on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from goodput.checkpoints.metadata import MetadataError, parse_json
from goodput.checkpoints.safepickle import Call, PickleError, read_pickle

SAFETENSORS_MAX_HEADER = 100_000_000  # safetensors' own limit
ZIP_MAGIC = b"PK\x03\x04"
PICKLE_MAGIC = b"\x80"
_EOCD = b"PK\x05\x06"
_EOCD64 = b"PK\x06\x06"
_LOCATOR64 = b"PK\x06\x07"
_CENTRAL = b"PK\x01\x02"
_EOCD_SIZE = 22
_LOCATOR64_SIZE = 20
_EOCD64_SIZE = 56
# The end record may be followed by a comment of up to 65,535 bytes.
ZIP_TAIL = _EOCD_SIZE + 0xFFFF + _LOCATOR64_SIZE + _EOCD64_SIZE


class FormatError(ValueError):
    """A file is not what its format requires (too short, no end record, a bad header)."""


def safetensors_header_length(head: bytes, size: int) -> int:
    """The JSON header's length from the first 8 bytes, checked against the file's size."""
    if size < 8 or len(head) < 8:
        raise FormatError(f"{size} bytes: shorter than safetensors' 8-byte header length")
    (length,) = struct.unpack("<Q", head[:8])
    if length == 0 or length > SAFETENSORS_MAX_HEADER:
        raise FormatError(f"its header length {length} is not a safetensors header (zeros, or another format)")
    if 8 + length > size:
        raise FormatError(f"truncated: its header alone needs {8 + length} bytes, the file has {size}")
    return int(length)


def safetensors_expected_size(header: bytes, length: int) -> int:
    """The exact file size a safetensors header describes."""
    try:
        text = header.decode("utf-8")
        data = parse_json(text)
    except (UnicodeDecodeError, MetadataError) as error:
        raise FormatError(f"its safetensors header does not parse ({str(error)[:80]})") from None
    if not isinstance(data, dict):
        raise FormatError("its safetensors header is not a JSON object")
    end = 0
    for name, tensor in data.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
                or offsets[0] > offsets[1]):
            raise FormatError(f"its safetensors header has no valid data_offsets for a tensor "
                              f"({str(name)[:40]!r})")
        end = max(end, offsets[1])
    return 8 + length + end


@dataclass(frozen=True, slots=True)
class ZipDirectory:
    """Where a zip's central directory lies, from its end records."""

    offset: int
    size: int
    entries: int


def zip_directory(tail: bytes, size: int) -> ZipDirectory:
    """The central directory's place, from the last `len(tail)` bytes of a `size`-byte zip.

    The end-of-central-directory record must end the file exactly (after its own comment), and
    the central directory must lie before it: a file cut anywhere after its first byte fails.
    """
    start = size - len(tail)
    at = tail.rfind(_EOCD)
    while at >= 0:
        if at + _EOCD_SIZE <= len(tail):
            (comment,) = struct.unpack("<H", tail[at + 20:at + _EOCD_SIZE])
            if at + _EOCD_SIZE + comment == len(tail):
                break
        at = tail.rfind(_EOCD, 0, at)
    if at < 0:
        raise FormatError("truncated: no zip end-of-central-directory record at its end")
    _sig, _disk, _cd_disk, _n_disk, entries, cd_size, cd_offset, _c = struct.unpack("<4sHHHHIIH",
                                                                                 tail[at:at + _EOCD_SIZE])
    end_of_directory = start + at
    if 0xFFFFFFFF in (cd_size, cd_offset) or entries == 0xFFFF:
        locator = at - _LOCATOR64_SIZE
        if locator < 0 or tail[locator:locator + 4] != _LOCATOR64:
            raise FormatError("its zip end record asks for ZIP64 records that are not there")
        (_sig, _disk, eocd64, _disks) = struct.unpack("<4sIQI", tail[locator:locator + _LOCATOR64_SIZE])
        record = eocd64 - start
        if record < 0 or record + _EOCD64_SIZE > locator or tail[record:record + 4] != _EOCD64:
            raise FormatError("its ZIP64 end record is not where its locator says")
        fields = struct.unpack("<4sQHHIIQQQQ", tail[record:record + _EOCD64_SIZE])
        entries, cd_size, cd_offset = fields[7], fields[8], fields[9]
        end_of_directory = eocd64
    if cd_offset + cd_size > end_of_directory:
        raise FormatError(f"its zip central directory ({cd_size} bytes at {cd_offset}) overruns its end "
                          f"records at {end_of_directory}: damaged")
    return ZipDirectory(offset=cd_offset, size=cd_size, entries=entries)


@dataclass(frozen=True, slots=True)
class ZipMember:
    name: str
    offset: int  # of its local header
    size: int  # compressed, as stored
    method: int


def zip_members(directory: bytes, limit: int = 100_000) -> list[ZipMember]:
    """The central directory's entries (name, local header offset, stored size, method)."""
    members: list[ZipMember] = []
    at = 0
    while at + 46 <= len(directory) and directory[at:at + 4] == _CENTRAL:
        if len(members) >= limit:
            raise FormatError(f"more than {limit} zip entries")
        fields = struct.unpack("<4sHHHHHHIIIHHHHHII", directory[at:at + 46])
        method, compressed, name_len, extra_len, comment_len, local = (fields[4], fields[8], fields[10],
                                                                       fields[11], fields[12], fields[16])
        name = directory[at + 46:at + 46 + name_len].decode("utf-8", "replace")
        extra = directory[at + 46 + name_len:at + 46 + name_len + extra_len]
        compressed, local = _zip64_extra(extra, compressed, fields[9], local)
        members.append(ZipMember(name=name, offset=local, size=compressed, method=method))
        at += 46 + name_len + extra_len + comment_len
    return members


def _zip64_extra(extra: bytes, compressed: int, uncompressed: int, local: int) -> tuple[int, int]:
    at = 0
    while at + 4 <= len(extra):
        tag, length = struct.unpack("<HH", extra[at:at + 4])
        body = extra[at + 4:at + 4 + length]
        if tag == 0x0001:
            values = [v for (v,) in struct.iter_unpack("<Q", body[: len(body) // 8 * 8])]
            if uncompressed == 0xFFFFFFFF and values:
                values.pop(0)
            if compressed == 0xFFFFFFFF and values:
                compressed = values.pop(0)
            if local == 0xFFFFFFFF and values:
                local = values.pop(0)
        at += 4 + length
    return compressed, local


def local_data_offset(header: bytes, member: ZipMember) -> int:
    """Where a stored member's bytes start, from its 30-byte local header (and name and extra)."""
    if len(header) < 30 or header[:4] != ZIP_MAGIC:
        raise FormatError(f"no zip local header where the directory puts {member.name[:60]!r}")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return member.offset + 30 + int(name_len) + int(extra_len)


def dcp_storage_ends(metadata: bytes) -> dict[str, int]:
    """For every shard file DCP's `.metadata` names, where its last recorded byte range ends.

    An empty result means the metadata records no byte ranges (a custom storage writer): then
    nothing can be checked against it."""
    try:
        root = read_pickle(metadata)
        if not isinstance(root, Call) or root.class_name() != "Metadata":
            raise FormatError("its .metadata does not hold a DCP Metadata object")
        storage = root.fields().get("storage_data")
        if storage is None:
            return {}
        if not isinstance(storage, dict):
            raise FormatError("its .metadata's storage_data is not a mapping")
        ends: dict[str, int] = {}
        for info in storage.values():
            relative, offset, length = _storage_info(info)
            ends[relative] = max(ends.get(relative, 0), offset + length)
        return ends
    except PickleError as error:
        raise FormatError(f"its .metadata cannot be read: {error}") from None


def _storage_info(info: Any) -> tuple[str, int, int]:
    fields = info.fields() if isinstance(info, Call) else {}
    relative, offset, length = fields.get("relative_path"), fields.get("offset"), fields.get("length")
    if not (isinstance(relative, str) and isinstance(offset, int) and isinstance(length, int)
            and _count(offset) and _count(length)):
        raise FormatError("its .metadata has a storage entry without relative_path, offset and length")
    if "/" in relative or relative in ("", ".", ".."):
        raise FormatError(f"its .metadata names a shard outside the checkpoint ({relative[:60]!r})")
    return relative, offset, length


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62


def pickle_top_level(data: bytes) -> dict[str, Any]:
    """The top-level dict of a torch.save `data.pkl` (string keys only), read without running it."""
    try:
        root = read_pickle(data)
    except PickleError as error:
        raise FormatError(f"its data.pkl cannot be read: {error}") from None
    if isinstance(root, Call):  # an OrderedDict or another dict subclass
        items = root.entries
        for item in root.items:
            if isinstance(item, tuple) and len(item) == 2:
                items = {**items, item[0]: item[1]}
    elif isinstance(root, dict):
        items = root
    else:
        return {}
    return {key: value for key, value in items.items() if isinstance(key, str)}
