"""The tailer against a real writer process that appends (and rotates) while it reads.

The writer flushes half lines, sleeps at odd moments and rotates by rename, the way a training job
and logrotate do; the tailer, restarted from its serialised cursor half way, must see every line
exactly once and in order. Timing is only ever used as a deadline, never asserted.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from goodput.detect.logtail import LogLine, LogTailer, TailCursor

NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)
LINES = 3000

WRITER = r"""
import os, sys, time
path, count, rotate_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = open(path, "ab", buffering=0)
for i in range(count):
    if i == rotate_at:
        out.close()
        os.rename(path, path + ".1")
        out = open(path, "ab", buffering=0)
    data = (f"{i % 8:>2}: step {i} " + "x" * (i % 97) + "\n").encode()
    half = len(data) // 2
    out.write(data[:half])
    if i % 7 == 0:
        time.sleep(0.0005)
    out.write(data[half:])
    if i % 100 == 0:
        time.sleep(0.002)
out.close()
"""


def expected(i: int) -> tuple[int, str]:
    return i % 8, f"step {i} " + "x" * (i % 97)


def run_writer(log: Path, rotate_at: int) -> subprocess.Popen[bytes]:
    log.touch()
    return subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(LINES), str(rotate_at)])


def collect(tail: LogTailer, seen: list[LogLine], until: int, deadline: float) -> None:
    while len(seen) < until and time.monotonic() < deadline:
        batch = tail.poll(NOW)
        seen.extend(batch)
        if not batch:
            time.sleep(0.002)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("rotate_at", [-1, LINES // 2], ids=["append-only", "rotated"])
def test_every_line_exactly_once_across_a_restart(tmp_path: Path, rotate_at: int) -> None:
    log = tmp_path / "train.out"
    writer = run_writer(log, rotate_at)
    seen: list[LogLine] = []
    deadline = time.monotonic() + 20
    try:
        with LogTailer(log, max_line_bytes=4096, chunk_bytes=512) as tail:
            collect(tail, seen, LINES // 3, deadline)
            saved = tail.cursor.model_dump_json()  # what the detector would persist
        with LogTailer(log, TailCursor.model_validate_json(saved), max_line_bytes=4096,
                       chunk_bytes=512) as tail:
            collect(tail, seen, LINES, deadline)
            assert writer.wait(timeout=max(0.1, deadline - time.monotonic())) == 0
            seen.extend(tail.poll(NOW))  # anything after the last line we waited for
    finally:
        writer.kill()
        writer.wait()
    assert [(line.rank, line.text) for line in seen] == [expected(i) for i in range(LINES)]
    assert not any(line.truncated for line in seen)
    if rotate_at < 0:
        assert [line.line_no for line in seen] == list(range(1, LINES + 1))
    else:
        numbers = [line.line_no for line in seen]
        assert numbers == list(range(1, rotate_at + 1)) + list(range(1, LINES - rotate_at + 1))


@pytest.mark.timeout(30)
def test_offsets_point_at_the_lines_in_the_file(tmp_path: Path) -> None:
    log = tmp_path / "train.out"
    writer = run_writer(log, -1)
    seen: list[LogLine] = []
    with LogTailer(log) as tail:
        collect(tail, seen, LINES, time.monotonic() + 20)
    assert writer.wait(timeout=10) == 0
    content = log.read_bytes()
    for line in seen[::97]:
        end = content.index(b"\n", line.offset)
        assert content[line.offset:end].decode().split(": ", 1)[1] == line.text
