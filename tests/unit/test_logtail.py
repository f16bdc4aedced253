"""The log tailer: partial lines, long lines, garbage, truncation, rotation and cursor restarts."""

from __future__ import annotations

import errno
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from goodput.detect.logtail import (
    MAX_LINE_BYTES,
    TRUNCATION_MARKER,
    LogLine,
    LogTailer,
    TailCursor,
    split_srun_label,
)

NOW = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def texts(lines: list[LogLine]) -> list[str]:
    return [line.text for line in lines]


def test_cursor_round_trips_through_json() -> None:
    cursor = TailCursor(path="/var/log/job/1001.out", inode=1234567, device=2049, offset=98765,
                        line_no=321, skipping=True)
    assert TailCursor.model_validate_json(cursor.model_dump_json()) == cursor
    assert TailCursor.model_validate(cursor.model_dump(mode="json")) == cursor


def test_complete_lines_only_and_partial_line_is_completed_later(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"first\nsecond\nthi")
    with LogTailer(log) as tail:
        lines = tail.poll(NOW)
        assert texts(lines) == ["first", "second"]
        assert [(line.offset, line.line_no) for line in lines] == [(0, 1), (6, 2)]
        assert lines[0].observed_at == NOW and lines[0].path == str(log)
        assert tail.cursor.offset == 13  # the partial "thi" is not committed
        assert tail.poll(NOW) == []
        append(log, b"rd\r\n")
        [third] = tail.poll(NOW)
        assert (third.text, third.offset, third.line_no) == ("third", 13, 3)
        assert tail.cursor.offset == log.stat().st_size


@pytest.mark.parametrize(("raw", "rank", "text"), [
    ("  3: loss=1.25", 3, "loss=1.25"), ("12: x", 12, "x"), ("0:", 0, ""), ("7: ", 7, ""),
    ("12:30 meeting", None, "12:30 meeting"), ("no label", None, "no label"),
    ("  3:  indented", 3, " indented"),
])
def test_srun_label_split(raw: str, rank: int | None, text: str) -> None:
    assert split_srun_label(raw) == (rank, text)


def test_ranks_parsed_into_lines_and_can_be_disabled(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b" 0: NCCL INFO ok\n11: RuntimeError: boom\nplain\n")
    with LogTailer(log) as tail:
        assert [(line.rank, line.text) for line in tail.poll(NOW)] == [
            (0, "NCCL INFO ok"), (11, "RuntimeError: boom"), (None, "plain")]
    with LogTailer(log, srun_labels=False) as tail:
        assert tail.poll(NOW)[0].text == " 0: NCCL INFO ok"


def test_binary_garbage_is_replaced_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"\xff\xfe\x00bad \xc3\n\xe2\x82\xac ok\r\n")
    with LogTailer(log) as tail:
        first, second = tail.poll(NOW)
    assert first.text == "\ufffd\ufffd\x00bad \ufffd"
    assert second.text == "€ ok"


def test_over_long_line_is_cut_marked_and_the_rest_skipped(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    long = b"y" * (MAX_LINE_BYTES + 300_000)
    append(log, long[:700_000])
    with LogTailer(log) as tail:
        assert tail.poll(NOW) == []  # under the cap: wait for the newline
        append(log, long[700_000:1_200_000])
        [cut] = tail.poll(NOW)  # over the cap: out at once, without waiting
        assert cut.truncated and cut.text == "y" * MAX_LINE_BYTES + TRUNCATION_MARKER
        assert cut.offset == 0 and cut.line_no == 1
        assert tail.cursor.skipping
        append(log, long[1_200_000:] + b"\nafter\n")
        [after] = tail.poll(NOW)
    assert (after.text, after.line_no, after.truncated) == ("after", 2, False)
    assert after.offset == len(long) + 1


def test_over_long_complete_line_in_one_read(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"z" * (2 * MAX_LINE_BYTES) + b"\nnext\n")
    with LogTailer(log) as tail:
        lines = tail.poll(NOW)
    assert [(len(line.text), line.truncated) for line in lines] == [
        (MAX_LINE_BYTES + len(TRUNCATION_MARKER), True), (4, False)]


def test_restart_inside_a_skipped_line_keeps_skipping(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"a" * 5000)
    with LogTailer(log, max_line_bytes=1000) as tail:
        [cut] = tail.poll(NOW)
        saved = tail.cursor.model_dump_json()
    assert cut.truncated
    append(log, b"a" * 3000 + b"\nnext\n")
    with LogTailer(log, TailCursor.model_validate_json(saved), max_line_bytes=1000) as tail:
        [line] = tail.poll(NOW)
    assert (line.text, line.line_no) == ("next", 2)


def test_truncation_restarts_at_zero(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"one\ntwo\nthree\n")
    with LogTailer(log) as tail:
        assert len(tail.poll(NOW)) == 3
        with open(log, "r+b") as f:
            f.truncate(0)
        append(log, b"new\n")
        [line] = tail.poll(NOW)
        assert (line.text, line.offset, line.line_no) == ("new", 0, 1)


def test_truncated_and_regrown_between_polls_is_detected(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"aaaa\nbbbb\n")
    with LogTailer(log) as tail:
        assert len(tail.poll(NOW)) == 2
        log.write_bytes(b"rewritten from the top, longer than before\nsecond\n")
        assert texts(tail.poll(NOW)) == ["rewritten from the top, longer than before", "second"]


def test_rotation_finishes_the_old_file_then_reads_the_new(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"old 1\n")
    with LogTailer(log) as tail:
        assert texts(tail.poll(NOW)) == ["old 1"]
        append(log, b"old 2\nold partial")
        os.rename(log, tmp_path / "job.out.1")
        append(log, b"new 1\n")
        lines = tail.poll(NOW)
        assert texts(lines) == ["old 2", "old partial", "new 1"]
        assert {line.path for line in lines} == {str(log)}  # the name each file had when opened
        assert [line.line_no for line in lines] == [2, 3, 1]
        assert tail.cursor.inode == log.stat().st_ino and tail.cursor.offset == 6


def test_deleted_file_waits_for_its_successor(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    with LogTailer(log) as tail:
        assert tail.poll(NOW) == []  # not there yet
        append(log, b"hello\n")
        assert texts(tail.poll(NOW)) == ["hello"]
        log.unlink()
        assert tail.poll(NOW) == []
        append(log, b"again\n")
        assert texts(tail.poll(NOW)) == ["again"]


def test_restart_after_rotation_while_away_finds_the_old_file(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"a\nb\n")
    with LogTailer(log) as tail:
        assert texts(tail.poll(NOW)) == ["a", "b"]
        saved = tail.cursor.model_dump_json()
    append(log, b"c\n")  # written while the detector was down
    os.rename(log, tmp_path / "job.out.1")
    append(log, b"d\n")
    with LogTailer(log, TailCursor.model_validate_json(saved)) as tail:
        assert texts(tail.poll(NOW)) == ["c", "d"]


def test_restart_after_truncation_while_away(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"aaaaaaaa\nbbbbbbbb\n")
    with LogTailer(log) as tail:
        tail.poll(NOW)
        saved = tail.cursor
    log.write_bytes(b"x\n")
    with LogTailer(log, saved) as tail:
        assert texts(tail.poll(NOW)) == ["x"]
    log.write_bytes(b"rewritten and longer than the old offset\n")  # the byte before it is no newline
    with LogTailer(log, saved) as tail:
        assert texts(tail.poll(NOW)) == ["rewritten and longer than the old offset"]


def test_start_at_end_reads_only_new_lines_and_the_line_in_progress(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"history 1\nhistory 2\nin prog")
    with LogTailer(log, start_at_end=True) as tail:
        assert tail.poll(NOW) == []
        append(log, b"ress\nnew\n")
        assert texts(tail.poll(NOW)) == ["in progress", "new"]


def test_a_poll_reads_at_most_its_budget(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"".join(b"line %04d\n" % i for i in range(1000)))  # 10 bytes a line
    with LogTailer(log, max_bytes_per_poll=1000, chunk_bytes=256) as tail:
        first = tail.poll(NOW)
        assert len(first) == 100
        rest = []
        while batch := tail.poll(NOW):
            rest += batch
    assert texts(first + rest) == [f"line {i:04d}" for i in range(1000)]


def test_poll_after_close_resumes_instead_of_starting_over(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    append(log, b"a\nb\npart")
    tail = LogTailer(log)
    assert texts(tail.poll(NOW)) == ["a", "b"]
    tail.close()
    append(log, b"ial\n")
    assert texts(tail.poll(NOW)) == ["partial"]
    tail.close()


def test_an_io_error_never_swallows_lines_already_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "job.out"
    append(log, b"one\ntwo\nthree\nfour\n")
    real_pread = os.pread
    calls = {"n": 0}

    def flaky_pread(fd: int, size: int, offset: int) -> bytes:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real_pread(fd, size, offset)

    monkeypatch.setattr("goodput.detect.logtail.os.pread", flaky_pread)
    with LogTailer(log, chunk_bytes=8) as tail:
        assert texts(tail.poll(NOW)) == ["one", "two"]  # read before the error: returned, not lost
        with pytest.raises(OSError, match="Input/output error"):
            tail.poll(NOW)  # the error surfaces on the next poll
        assert texts(tail.poll(NOW)) == ["three", "four"]


@pytest.mark.parametrize(("raw", "rank", "text"), [
    ("12345678: x", None, "12345678: x"),  # eight digits: not an srun task id
    ("1234567: x", 1234567, "x"),
    ("٣: x", None, "٣: x"),  # only ASCII digits are a label
    ("9" * 5000 + ": x", None, "9" * 5000 + ": x"),
    (" " * 100_000 + "3: x", 3, "x"),
    ("3:\n", 3, ""),
    ("3:x", None, "3:x"),
])
def test_srun_label_numbers_are_bounded(raw: str, rank: int | None, text: str) -> None:
    assert split_srun_label(raw) == (rank, text)
