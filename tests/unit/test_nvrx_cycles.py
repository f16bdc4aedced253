"""NVRx's cycle-info files: the comment tag, the strict parser and the bounded, symlink-free reader."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from goodput.detect.nvrx_cycles import (
    MAX_CYCLES,
    MAX_FILE_BYTES,
    CycleInfoError,
    CycleReport,
    cycle_file_key,
    cycle_note,
    cycles_dir_from_comment,
    cycles_tag,
    parse_cycle_info,
    read_cycles,
    summarize,
)
from goodput.scheduler import JobInfo, JobState

# As ft_launcher 0.7.0 writes it (protobuf JSON, field names kept, 64-bit generation as a string).
WRITTEN = {"job_id": "42", "attempt_index": 0, "cycle_number": 1, "cycle_start_time": "2026-12-01T13:23:08.412Z",
           "cycle_end_time": "", "cycle_log_file": "", "active_nodes": "node[1-2]", "standby_nodes": "",
           "generation": "0", "active_ranks": "0-1"}


def cycle_file(directory: Path, cycle: int, *, attempt: int = 0, job: str = "42", **fields: Any) -> Path:
    path = directory / f"cycle_info.{job}.{attempt}.{cycle}"
    path.write_text(json.dumps({**WRITTEN, "job_id": job, "attempt_index": attempt, "cycle_number": cycle,
                                **fields}, indent=2))
    return path


def test_a_written_file_parses() -> None:
    info = parse_cycle_info(json.dumps(WRITTEN).encode())
    assert (info.job_id, info.attempt_index, info.cycle_number) == ("42", 0, 1)
    assert info.cycle_start_time == datetime(2026, 12, 1, 13, 23, 8, 412000, tzinfo=UTC)
    assert info.cycle_end_time is None and info.active_nodes == "node[1-2]" and info.active_ranks == "0-1"


def test_fields_protobuf_leaves_out_default_to_zero_and_empty() -> None:
    info = parse_cycle_info(b'{"job_id": "42"}')
    assert (info.attempt_index, info.cycle_number, info.generation, info.active_nodes) == (0, 0, 0, "")


@pytest.mark.parametrize("data", [
    b"[]", b"not json", b'{"job_id": 42}', b'{"job_id": "../../etc"}', b'{"job_id": ""}',
    b'{"job_id": "42", "cycle_number": -1}', b'{"job_id": "42", "cycle_number": true}',
    b'{"job_id": "42", "cycle_number": 1e400}', b'{"job_id": "42", "cycle_number": NaN}',
    b'{"job_id": "42", "generation": "99999999999999999999"}',
    b'{"job_id": "42", "active_nodes": "node1\\u001b[2J"}', b'{"job_id": "42", "cycle_start_time": "yesterday"}',
    b'{"job_id": "42", "cycle_start_time": "2026-12-01T13:23:08"}', b"\xff\xfe",
    b'{"job_id": "42", "active_nodes": "' + b"n" * 2000 + b'"}', b"[" * 100_000,
    b'{"job_id": "42", "pad": "' + b" " * MAX_FILE_BYTES + b'"}',
])
def test_malformed_files_are_refused(data: bytes) -> None:
    with pytest.raises(CycleInfoError):
        parse_cycle_info(data)


def test_the_comment_tag() -> None:
    assert cycles_dir_from_comment("goodput:opt-in goodput:nvrx-cycles=/lustre/run7/nvrx") == "/lustre/run7/nvrx"
    assert cycles_dir_from_comment("goodput:opt-in goodput:ckpt=dcp:/x") is None
    assert cycles_tag("/lustre/run7/nvrx") == "goodput:nvrx-cycles=/lustre/run7/nvrx"
    for bad in ("goodput:nvrx-cycles=relative/dir", "goodput:nvrx-cycles=/a/../etc",
                "goodput:nvrx-cycles=/a\x1b[2J", "goodput:nvrx-cycles=/a goodput:nvrx-cycles=/b",
                "goodput:nvrx-cycles=/" + "a" * 5000):
        with pytest.raises(CycleInfoError):
            cycles_dir_from_comment(bad)


def test_only_the_jobs_own_cycle_files_are_named() -> None:
    assert cycle_file_key("cycle_info.42.0.3", "42") == (0, 3)
    for name in ("cycle_info.42.current", "cycle_info.42.0.3.tmp", "cycle_info.43.0.3", "cycle_info.42.0.03",
                 "cycle_info.42.x.3", "other", "cycle_info.42.0." + "9" * 20):
        assert cycle_file_key(name, "42") is None, name


def test_reading_a_directory_takes_the_attempts_cycles_oldest_first(tmp_path: Path) -> None:
    for cycle in (0, 1, 2):
        cycle_file(tmp_path, cycle, cycle_end_time="2026-12-01T13:24:00Z" if cycle < 2 else "")
    cycle_file(tmp_path, 0, attempt=1)  # the next Slurm attempt's
    cycle_file(tmp_path, 0, job="43")  # another job's
    (tmp_path / "cycle_info.42.current").symlink_to("cycle_info.42.0.2")
    report = read_cycles(str(tmp_path), "42", 0, owner_uid=os.getuid())
    assert [c.cycle_number for c in report.cycles] == [0, 1, 2] and report.skipped == ()
    line = summarize(report, 0)
    assert "cycle 2 of attempt 0 (2 in-job restarts so far)" in line
    assert "on node[1-2]" in line and "ranks 0-1" in line and "still running" in line


def test_hostile_entries_are_skipped_with_a_reason(tmp_path: Path) -> None:
    secret = tmp_path.parent / "secret.json"
    secret.write_text(json.dumps({**WRITTEN, "cycle_number": 0}))
    (tmp_path / "cycle_info.42.0.0").symlink_to(secret)  # a symlink to someone else's file
    os.mkfifo(tmp_path / "cycle_info.42.0.1")  # would block a naive open
    (tmp_path / "cycle_info.42.0.2").write_bytes(b"x" * (MAX_FILE_BYTES + 10))  # too large
    cycle_file(tmp_path, 3, cycle_number=7)  # contents disagree with the name
    cycle_file(tmp_path, 4)
    report = read_cycles(str(tmp_path), "42", 0, owner_uid=os.getuid())
    assert [c.cycle_number for c in report.cycles] == [4]
    reasons = " | ".join(report.skipped)
    assert "symbolic link" in reasons and "not a regular file" in reasons and "larger than" in reasons
    assert "cycle 7" in reasons


def test_files_of_another_owner_are_not_read(tmp_path: Path) -> None:
    cycle_file(tmp_path, 0)
    report = read_cycles(str(tmp_path), "42", 0, owner_uid=os.getuid() + 1)
    assert report.cycles == () and "not owned by the job's owner" in report.skipped[0]


def test_a_symlinked_or_missing_directory_is_not_read(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    cycle_file(real, 0)
    (tmp_path / "link").symlink_to(real)
    linked = read_cycles(str(tmp_path / "link"), "42", 0, owner_uid=None)
    assert linked.cycles == () and "symbolic link" in linked.skipped[0]
    missing = read_cycles(str(tmp_path / "nowhere"), "42", 0, owner_uid=None)
    assert missing.cycles == () and "does not exist" in missing.skipped[0]
    assert "no cycle recorded" in summarize(missing, 0)


def test_only_the_newest_cycles_are_read(tmp_path: Path) -> None:
    for cycle in range(MAX_CYCLES + 5):
        cycle_file(tmp_path, cycle)
    report = read_cycles(str(tmp_path), "42", 0, owner_uid=None)
    assert report.truncated and len(report.cycles) == MAX_CYCLES
    assert report.cycles[-1].cycle_number == MAX_CYCLES + 4


def test_the_note_for_a_job(tmp_path: Path) -> None:
    cycle_file(tmp_path, 0, cycle_end_time="2026-12-01T13:24:00Z")
    job = JobInfo(job_id="42", state=JobState.RUNNING, comment=f"goodput:opt-in {cycles_tag(str(tmp_path))}",
                  user_id=os.getuid())
    assert "cycle 0 of attempt 0 (0 in-job restarts so far)" in cycle_note(job) and "ended" in cycle_note(job)
    assert cycle_note(job.model_copy(update={"comment": "goodput:opt-in"})) == ""
    assert "not read" in cycle_note(job.model_copy(update={"comment": "goodput:nvrx-cycles=relative"}))
    assert summarize(CycleReport(directory="/d"), 0).startswith("NVRx cycle info in /d: no cycle")
