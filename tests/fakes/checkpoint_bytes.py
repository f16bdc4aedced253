"""The bytes real checkpoint formats begin and end with, for fake files of any size.

The fake filesystem stores a shard as a size plus a head and a tail (the middle reads as zeros,
like a sparse file), so a 512 MB safetensors file costs a few hundred bytes in a test. These
builders write what the real libraries write there: a safetensors header describing exactly the
file's size, a torch.save zip's local header and data.pkl up front and its central directory and
ZIP64 end records at the end, and a DCP `.metadata` pickle with the opcodes torch emits (checked
against torch 2.13's own output; the real-library fixtures under tests/fixtures/checkpoints cover
the rest). No pickle here is ever loaded by goodput: it is read by goodput.checkpoints.safepickle.
"""

from __future__ import annotations

import json
import pickle
import struct
import zlib

_ZIP64 = 0xFFFFFFFF


def safetensors_head(size: int) -> bytes:
    """The first bytes of a `size`-byte safetensors file: header length and JSON header (padded
    with spaces, as safetensors allows), one tensor's data filling the rest."""
    data = size
    for _ in range(8):
        body = {"__metadata__": {"format": "pt"}, "w": {"dtype": "U8", "shape": [data], "data_offsets": [0, data]}}
        header = json.dumps(body).encode()
        pad = size - 8 - len(header) - data
        if pad >= 0:
            header += b" " * pad
            return struct.pack("<Q", len(header)) + header
        data += pad
    raise ValueError(f"no safetensors header fits {size} bytes")


def _local_header(name: bytes, data: bytes) -> bytes:
    return struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, 0, 0, 0, 0, zlib.crc32(data), len(data), len(data),
                       len(name), 0) + name


def _central(name: bytes, crc: int, size: int, offset: int) -> bytes:
    extra = struct.pack("<HHQQQ", 0x0001, 24, size, size, offset)
    return struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 45, 45, 0, 0, 0, 0, crc, _ZIP64, _ZIP64,
                       len(name), len(extra), 0, 0, 0, 0, _ZIP64) + name + extra


def torch_zip(size: int, fields: dict[str, object] | None = None) -> tuple[bytes, bytes]:
    """(head, tail) of a `size`-byte torch.save zip whose data.pkl pickles `fields` (a plain dict)
    and whose one tensor storage fills the rest, with the ZIP64 end records torch writes."""
    pickled = pickle.dumps(fields or {"state": "tensors elided"}, protocol=2)
    pkl_name, data_name = b"archive/data.pkl", b"archive/data/0"
    head = _local_header(pkl_name, pickled) + pickled
    cd_tail_probe = _central(pkl_name, 0, 0, 0) + _central(data_name, 0, 0, 0)
    tail_length = len(cd_tail_probe) + 56 + 20 + 22
    data_offset = len(head)
    data_size = size - len(head) - 30 - len(data_name) - tail_length
    if data_size < 0:
        raise ValueError(f"{size} bytes is too small for a torch zip")
    directory = (_central(pkl_name, zlib.crc32(pickled), len(pickled), 0)
                 + _central(data_name, 0, data_size, data_offset))
    cd_offset = size - tail_length
    eocd64 = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, 2, 2, len(directory), cd_offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, cd_offset + len(directory), 1)
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, _ZIP64, _ZIP64, 0)
    return head, directory + eocd64 + locator + eocd


# DCP's .metadata, opcode by opcode, as torch pickles it (protocol 4, NEWOBJ then BUILD).

def _text(value: str) -> bytes:
    raw = value.encode()
    return b"\x8c" + bytes([len(raw)]) + raw if len(raw) < 256 else b"X" + struct.pack("<I", len(raw)) + raw


def _number(value: int) -> bytes:
    return b"\x8a\x08" + value.to_bytes(8, "little", signed=True)


def _dataclass(module: str, name: str, fields: list[tuple[str, bytes]]) -> bytes:
    state = b"".join(_text(key) + value for key, value in fields)
    return _text(module) + _text(name) + b"\x93" + b")\x81" + b"}(" + state + b"ub"


def dcp_metadata(files: dict[str, int]) -> bytes:
    """A `.metadata` recording one tensor filling each shard file (name → size in bytes)."""
    items = b""
    for index, (relative, size) in enumerate(sorted(files.items())):
        key = _dataclass("torch.distributed.checkpoint.metadata", "MetadataIndex",
                         [("fqn", _text(f"layer.{index}.weight")), ("offset", b"N"), ("index", b"N")])
        value = _dataclass("torch.distributed.checkpoint.filesystem", "_StorageInfo",
                           [("relative_path", _text(relative)), ("offset", _number(0)), ("length", _number(size))])
        items += key + value
    body = _dataclass("torch.distributed.checkpoint.metadata", "Metadata",
                      [("state_dict_metadata", b"}"), ("planner_data", b"N"), ("storage_data", b"}(" + items + b"u")])
    return b"\x80\x04" + body + b"."


def file_bytes(name: str, size: int = 512, fields: dict[str, object] | None = None) -> bytes:
    """A whole small file as its format begins and ends it (by suffix), for trees on real disk."""
    if name.endswith((".pt", ".pth", ".bin", ".ckpt")):
        head, tail = torch_zip(size, fields)
        return head + b"\0" * (size - len(head) - len(tail)) + tail
    if name.endswith(".safetensors"):
        head = safetensors_head(size)
        return head + b"\0" * (size - len(head))
    return b"x" * 16
