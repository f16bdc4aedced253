"""Job-controlled output files: a FIFO, a symlink or someone else's file is refused, never read."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.progress import ProgressReader, output_sizes
from goodput.detect.logtail import LogTailer
from goodput.untrusted_files import UnsafeFileError, file_size, open_job_file

NOW = datetime(2026, 12, 1, tzinfo=UTC)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"


def test_a_regular_file_of_the_owner_opens(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    log.write_text("hello\n")
    fd = open_job_file(log, owner_uid=os.getuid())
    try:
        assert os.read(fd, 100) == b"hello\n"
    finally:
        os.close(fd)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "out.log"
    os.mkfifo(fifo)  # open(O_RDONLY) without O_NONBLOCK would wait for a writer forever
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        open_job_file(fifo)
    with LogTailer(fifo) as tailer, pytest.raises(UnsafeFileError):
        tailer.poll(NOW)


def test_a_symlink_to_another_file_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "root-only"
    secret.write_text(XID)
    secret.chmod(0o600)
    link = tmp_path / "out.log"
    link.symlink_to(secret)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        open_job_file(link)
    with LogTailer(link) as tailer, pytest.raises(UnsafeFileError):
        tailer.poll(NOW)
    assert file_size(link) is None and output_sizes([str(link)]) == {str(link): 0}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_file_not_owned_by_the_jobs_owner_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "out.log"
    theirs.write_text(XID)
    os.chown(theirs, 0, 0)
    with pytest.raises(UnsafeFileError, match="not by the job's owner"):
        open_job_file(theirs, owner_uid=4242)
    with LogTailer(theirs, owner_uid=4242) as tailer, pytest.raises(UnsafeFileError):
        tailer.poll(NOW)
    os.chown(theirs, 4242, 4242)
    with LogTailer(theirs, owner_uid=4242) as tailer:
        assert [line.text for line in tailer.poll(NOW)] == [XID.strip()]


def test_the_verifier_reads_no_progress_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.log"
    real.write_text("iteration 50/ 100 | elapsed time per iteration (ms): 100.0\n")
    link = tmp_path / "out.log"
    link.symlink_to(real)
    assert ProgressReader({}).poll([str(link)]) is None
    assert ProgressReader({}).poll([str(real)]) == 50
