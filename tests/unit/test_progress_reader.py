"""Reading a resumed attempt's progress: only lines after the recorded offset count."""

from __future__ import annotations

from pathlib import Path

from activities.progress import ProgressReader, output_sizes

LINE = "iteration {}/ 1000 | elapsed time per iteration (ms): 100.0\n"


def test_old_lines_before_the_offset_never_count(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    log.write_text(LINE.format(240))
    reader = ProgressReader(output_sizes([str(log)]))
    assert reader.poll([str(log)]) is None
    with log.open("a") as out:
        out.write(LINE.format(101) + "iteration 10")  # a partial line is not a step yet
    assert reader.poll([str(log)]) == 101
    with log.open("a") as out:
        out.write("2/ 1000 | x\n")
    assert reader.poll([str(log)]) == 102


def test_truncated_file_is_read_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    log.write_text(LINE.format(500) * 10)
    reader = ProgressReader(output_sizes([str(log)]))
    log.write_text(LINE.format(101))  # Slurm truncated the output for the new attempt
    assert reader.poll([str(log)]) == 101


def test_missing_files_are_not_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "not-yet.log")
    assert output_sizes([missing]) == {missing: 0}
    assert ProgressReader({}).poll([missing]) is None
