"""Hostile shard headers, zip tails and pickles: the format readers reject cleanly, run nothing.

A job's owner writes every byte of its checkpoint files, and goodput now reads some of them: a
safetensors header, a torch zip's end records and central directory, DCP's `.metadata` and a
torch file's `data.pkl` (both pickles, interpreted as data by goodput.checkpoints.safepickle).
Each target starts from what the real libraries write (tests/fakes/checkpoint_bytes.py) and
mutates it (bytes flipped, cut, spliced, duplicated) or builds opcode soup from scratch; the
reader must return or raise its typed error (`PickleError`, `FormatError`) with a message.
"""

from __future__ import annotations

import pickle
import pickletools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.checkpoints.formats import (
    ZIP_TAIL,
    FormatError,
    dcp_storage_ends,
    local_data_offset,
    pickle_top_level,
    safetensors_expected_size,
    safetensors_header_length,
    zip_directory,
    zip_members,
)
from goodput.checkpoints.safepickle import PickleError, read_pickle, walk
from tests.fakes.checkpoint_bytes import dcp_metadata, safetensors_head, torch_zip
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

OPCODE_BYTES = sorted({op.code.encode("latin-1") for op in pickletools.opcodes})
values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                                st.binary(max_size=20)),
                      lambda inner: st.one_of(st.lists(inner, max_size=5), st.tuples(inner, inner),
                                              st.dictionaries(st.text(max_size=8), inner, max_size=5)),
                      max_leaves=30)


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "splice", "repeat"]))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            data = data[:at] + data[at + draw(st.integers(1, 64)):]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "splice":
            data[at:at] = draw(st.sampled_from(OPCODE_BYTES)) + draw(st.binary(max_size=9))
        elif kind == "repeat":
            chunk = data[at:at + draw(st.integers(1, 32))]
            data[at:at] = chunk * draw(st.integers(1, 2000))
    return bytes(data)


def pickles() -> st.SearchStrategy[bytes]:
    plain = st.builds(lambda v, p: pickle.dumps(v, protocol=p), values, st.integers(0, 5))
    metadata = st.dictionaries(st.sampled_from(["__0_0.distcp", "__1_0.distcp", "__0_1.distcp", "x/../y", ""]),
                               st.integers(0, 2**63 - 1), max_size=4).map(dcp_metadata)
    soup = st.lists(st.tuples(st.sampled_from(OPCODE_BYTES), st.binary(max_size=9)), max_size=60).map(
        lambda ops: b"".join(code + arg for code, arg in ops))
    return st.one_of(plain.flatmap(mutated), metadata.flatmap(mutated), soup)


@given(pickles())
def test_pickle_reader(data: bytes) -> None:
    result = rejects_cleanly("checkpoint-pickle", lambda: list(walk(read_pickle(data))), (PickleError,))
    assert result is None or len(result) >= 1
    rejects_cleanly("checkpoint-dcp-metadata", lambda: dcp_storage_ends(data), (FormatError,))
    rejects_cleanly("checkpoint-data-pkl", lambda: pickle_top_level(data), (FormatError,))


@given(st.integers(9, 1 << 20).flatmap(lambda size: mutated(safetensors_head(size)).map(lambda h: (h, size))))
def test_safetensors_header(case: tuple[bytes, int]) -> None:
    head, size = case

    def check() -> int:
        length = safetensors_header_length(head[:8], size)
        return safetensors_expected_size(head[8:8 + length], length)

    expected = rejects_cleanly("checkpoint-safetensors", check, (FormatError,))
    assert expected is None or expected >= 8


@st.composite
def zips(draw: st.DrawFn) -> bytes:
    size = draw(st.integers(2048, 4096))
    head, tail = torch_zip(size, draw(st.dictionaries(st.text(max_size=8), st.integers(-2**70, 2**70), max_size=4)))
    return draw(mutated(head + b"\0" * (size - len(head) - len(tail)) + tail))


@given(zips())
def test_zip_records(data: bytes) -> None:
    def check() -> int:
        where = zip_directory(data[-ZIP_TAIL:], len(data))
        members = zip_members(data[where.offset:where.offset + where.size])
        for member in members:
            start = local_data_offset(data[member.offset:member.offset + 30], member)
            if member.name.endswith("data.pkl"):
                pickle_top_level(data[start:start + member.size])
        return len(members)

    rejects_cleanly("checkpoint-zip", check, (FormatError,))
