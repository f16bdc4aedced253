"""Honest detection latency: an anomaly is observable from when its line was written, not from
when the watcher happened to read it (the old metric stamped both from the same clock: ~0 s)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from goodput.detect.live import LiveLogDetector, observable_at
from goodput.detect.logtail import FIRST_READ_HORIZON, LogLine, LogTailer
from goodput.detect.stamps import line_time
from goodput.models import IncidentKey

T0 = datetime(2026, 12, 1, 9, 0, 10, tzinfo=UTC)
EARLIER = T0 - timedelta(hours=1)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def test_a_zoned_leading_stamp_is_the_line_time() -> None:
    assert line_time(f"2026-12-01T09:00:02.250Z {XID}", EARLIER, T0) == datetime(2026, 12, 1, 9, 0, 2, 250000,
                                                                                  tzinfo=UTC)
    assert line_time("  3: [2026-12-01 10:00:01+01:00] rank 3 failed", EARLIER, T0) == \
        datetime(2026, 12, 1, 9, 0, 1, tzinfo=UTC)


def test_stamps_that_cannot_be_believed_are_not_used() -> None:
    assert line_time("2026-12-01 09:00:02 no zone: the node's local time", EARLIER, T0) is None
    assert line_time("2026-12-01T09:05:00Z written after it was read?", EARLIER, T0) is None
    assert line_time("2020-01-01T00:00:00Z a job claiming years of latency", EARLIER, T0) is None
    assert line_time("2026-13-45T99:99:99Z", EARLIER, T0) is None
    assert line_time("x" * 100_000, EARLIER, T0) is None


def test_the_anomaly_is_observable_from_the_line_not_the_poll() -> None:
    line = LogLine(path="/l", offset=0, line_no=1, text=f"2026-12-01T09:00:02Z {XID}", observed_at=T0,
                   written_at=T0 - timedelta(seconds=3))
    assert observable_at(line, T0) == datetime(2026, 12, 1, 9, 0, 2, tzinfo=UTC)
    unstamped = line.model_copy(update={"text": XID})
    assert observable_at(unstamped, T0) == T0 - timedelta(seconds=3)
    assert observable_at(unstamped.model_copy(update={"written_at": None}), T0) == T0
    [anomaly] = LiveLogDetector.start(IncidentKey(cluster="c", job_id="1", job_attempt=0), T0).feed(
        [line], T0, T0 + timedelta(milliseconds=40))
    assert (anomaly.detected_at - anomaly.observed_at).total_seconds() > 8


def test_the_tailer_takes_the_write_time_from_the_file_within_bounds(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_text("first\n")
    tailer = LogTailer(log)
    now = datetime.now(UTC)
    five_ago = now - timedelta(seconds=5)
    os.utime(log, (five_ago.timestamp(), five_ago.timestamp()))
    [first] = tailer.poll(now)
    assert first.written_at is not None and abs((first.written_at - five_ago).total_seconds()) < 0.01

    with log.open("a") as out:
        out.write("second\n")
    past = now - timedelta(days=30)  # the job's file: its mtime is the job's to set
    os.utime(log, (past.timestamp(), past.timestamp()))
    [second] = tailer.poll(now + timedelta(seconds=2))
    assert second.written_at == now  # not before the previous poll: the line was not there then

    with log.open("a") as out:
        out.write("third\n")
    future = now + timedelta(days=1)
    os.utime(log, (future.timestamp(), future.timestamp()))
    [third] = tailer.poll(now + timedelta(seconds=4))
    assert third.written_at == now + timedelta(seconds=4)  # never after it was read
    tailer.close()


def test_a_first_read_trusts_an_old_write_time_only_so_far(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_text("written long ago\n")
    old = datetime.now(UTC) - timedelta(days=2)
    os.utime(log, (old.timestamp(), old.timestamp()))
    now = datetime.now(UTC)
    with LogTailer(log) as tailer:
        [line] = tailer.poll(now)
    assert line.written_at == now - FIRST_READ_HORIZON
