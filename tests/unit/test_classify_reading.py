"""`iter_lines` reads a log in large blocks for speed; these tests hold it to the line-by-line reading
it replaced (decoding, CR stripping, over-long lines cut, the last line without a newline), on random
bytes and with the caps shrunk so over-long lines and lines straddling blocks are common; the
matcher, which hands a hit line's bytes out of its batch, to matching each line on its own; and
`classify_file`'s byte path (`Catalogue.scan_blocks`, which decodes only hit lines) to scanning the
decoded lines, match for match."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goodput.diagnose import classify
from goodput.diagnose.signatures import default_catalogue, matcher
from goodput.diagnose.signatures.prefixes import MIN_PREFIX_REPEATS, RepeatedPrefix, split_prefix_bytes
from goodput.untrusted_text import utf8


def reference_lines(stream: BinaryIO, cap: int) -> Iterator[str]:
    """The former reader: one `readline` per line, the tail of an over-long line skipped."""
    while True:
        chunk = stream.readline(cap)
        if not chunk:
            return
        if not chunk.endswith(b"\n"):
            while True:
                rest = stream.readline(cap)
                if not rest or rest.endswith(b"\n"):
                    break
        yield chunk.decode("utf-8", errors="replace").rstrip("\r\n")


# Pieces that exercise every branch: CRs, newlines, invalid and truncated UTF-8, multi-byte characters.
_PIECES = st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\r\n", b"\n\n", b"\xff", b"\xe2\x82", b"\xe2\x82\xac",
                           b"\xf0\x9f\x98\x80", b"\xc3", b"NCCL WARN ", b"x" * 7, b"\x00"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(_PIECES, max_size=80), cap=st.integers(1, 24), block=st.integers(1, 40))
def test_block_reader_equals_the_line_reader(pieces: list[bytes], cap: int, block: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"".join(pieces)
    with monkeypatch.context() as m:
        m.setattr(classify, "_READ_CAP", cap)
        m.setattr(classify, "_BLOCK", block)
        got = list(classify.iter_lines(io.BytesIO(data)))
    assert got == list(reference_lines(io.BytesIO(data), cap))


def test_real_caps_cut_a_huge_line_and_keep_memory_bounded() -> None:
    data = b"first\r\n" + b"\xe2\x82\xac" * 400_000 + b"\nsecond\n" + b"y" * 3_000_000
    want = list(reference_lines(io.BytesIO(data), classify._READ_CAP))
    assert list(classify.iter_lines(io.BytesIO(data))) == want
    assert [len(w) for w in want] == [5, classify._READ_CAP // 3 + 1, 6, classify._READ_CAP]


def test_scan_reads_each_hit_line_from_the_batch_bytes_alone() -> None:
    """The matcher hands a hit line's bytes from its batch to the line matcher: they must be that
    line's bytes exactly (no earlier line, no newline), whatever line of the batch it is."""
    from benchmarks.classify_throughput import generate
    from goodput.diagnose.signatures import default_catalogue

    cat = default_catalogue()
    lines = [*generate(1500, 0.3, seed=4), "x" * 70_000 + " NCCL WARN cut", "Ünïcødé ✓ NCCL WARN after"]
    scanned = [(m.line_no, m.signature.id, m.text) for m in cat.scan(lines)]
    one_by_one = [(m.line_no, m.signature.id, m.text) for n, line in enumerate(lines, 1)
                  for m in cat.match_line(line, n)]
    assert scanned == one_by_one
    assert len({n for n, _, _ in scanned}) > 300


# Bytes that make lines hit: literals of several signatures (a host prefix, an Xid, a Python error).
_HITS = st.sampled_from([b"node7:4411:4411 [0] NCCL WARN Call to connect returned Connection refused",
                         b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                         b"KeyError: 'x'", b"srun: error: node7: task 3: Exited with exit code 1",
                         b"gpu7: RuntimeError: CUDA error: an illegal memory access was encountered"])


def _key(m: matcher.Match) -> tuple[object, ...]:
    """A match as both paths must agree on it (`_inferable` says which lines they may disagree on)."""
    return m.line_no, m.signature.id, m.text, tuple(sorted(m.groups.items())), m.context


def _inferable(lines: Iterator[str]) -> set[int]:
    """The numbers of lines that start with a prefix a chunk of log that repeats it would take for
    the line's host (`prefixes.RepeatedPrefix`). The two paths cut the log into chunks differently
    (lines or bytes), so for these lines alone one may infer the host where the other does not, and
    the message then starts after the prefix for one and at it for the other: their matches may differ."""
    found = set()
    for number, line in enumerate(lines, 1):
        data = utf8(line[:matcher.MAX_SCAN_CHARS])
        context, offset = split_prefix_bytes(data)
        repeated = RepeatedPrefix(b"\n".join([data] * MIN_PREFIX_REPEATS))
        if context.host is None and repeated.host(data, offset) is not None:
            found.add(number)
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.one_of(_PIECES, _HITS), max_size=60), cap=st.integers(8, 200),
       block=st.integers(1, 300), chunk=st.integers(1, 120))
def test_the_byte_scan_equals_scanning_the_decoded_lines(pieces: list[bytes], cap: int, block: int, chunk: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"".join(pieces)
    cat = default_catalogue()
    with monkeypatch.context() as m:
        # the reader cuts a line at 4 bytes per character of the matcher's cap, as shipped
        m.setattr(classify, "_READ_CAP", 4 * cap)
        m.setattr(classify, "_BLOCK", block)
        m.setattr(matcher, "MAX_SCAN_CHARS", cap)
        m.setattr(matcher, "_CHUNK_BYTES", chunk)
        skip = _inferable(classify.iter_lines(io.BytesIO(data)))
        by_bytes = [_key(hit) for hit in cat.scan_blocks(classify._byte_blocks(io.BytesIO(data)))
                    if hit.line_no not in skip]
        by_text = [_key(hit) for hit in cat.scan(classify.iter_lines(io.BytesIO(data))) if hit.line_no not in skip]
    assert by_bytes == by_text


def test_classify_file_gives_the_verdict_of_its_lines(tmp_path: Path) -> None:
    from benchmarks.classify_throughput import generate

    lines = [*generate(3000, 0.2, seed=9), "Ünïcødé ✓ NCCL WARN after", "x" * 70_000 + " NCCL WARN cut"]
    path = tmp_path / "job.log"
    path.write_bytes(b"\r\n".join(line.encode() for line in lines) + b"\xff\n")
    with path.open("rb") as stream:
        want = classify.verdict_json(str(path), classify.classify_lines(classify.iter_lines(stream)))
    assert classify.verdict_json(str(path), classify.classify_file(str(path))) == want

