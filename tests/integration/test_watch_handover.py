"""A requeued job's log watcher without its predecessor's cursors never pins old lines on the new attempt.

Found by the latency benchmark on the lab: a job that crashed seconds after it started got a second,
needless requeue. Its next attempt's watcher had no cursors to take over, read the shared output
file from the start, and took the first attempt's NCCL timeout for its own.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.watch import WatchActivities
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.logtail import TailCursor
from goodput.detect.watch import WatchJobInput
from goodput.models import IncidentKey, LogMark
from goodput.scheduler import JobState
from tests.fakes.sink import RecordingSink

pytestmark = pytest.mark.timeout(30)
OLD = ("[rank0]:[E1129 06:22:43.551920 41877 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
       "operation timeout: WorkNCCL(SeqNum=96022, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
       "ran for 600083 milliseconds before timing out.")
NEW = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


class Launcher:
    """The predecessor's watch is gone: no cursors to hand over, no marks delivered."""

    def __init__(self, cursors: tuple[TailCursor, ...] = ()) -> None:
        self.cursors = cursors
        self.asked: list[int] = []

    async def launch(self, request: WatchJobInput) -> None:
        raise AssertionError("a job watcher launches nothing")

    async def handover(self, cluster: str, job_id: str, attempt: int, wait_s: float) -> tuple[TailCursor, ...]:
        self.asked.append(attempt)
        return self.cursors

    async def delivered(self, key: IncidentKey) -> tuple[LogMark, ...]:
        return ()


async def watch_second_attempt(log: Path, launcher: Launcher) -> RecordingSink:
    fake = FakeScheduler()
    job = fake.snapshot().jobs["1001"].model_copy(update={
        "nodes": ("node2",), "stdout_path": str(log), "user_id": os.getuid(), "restart_count": 1})
    fake.add_job(job)
    sink = RecordingSink()
    watch = asyncio.create_task(ActivityEnvironment().run(
        WatchActivities(fake, sink, launcher).watch_job_logs,
        WatchJobInput(cluster="c1", job=job, started_at=datetime.now(UTC), poll_interval_s=0.05,
                      job_check_interval_s=0.2)))
    await asyncio.sleep(0.5)  # the watcher has opened the file
    with log.open("a") as out:
        out.write(NEW + "\n")
    for _ in range(200):
        if sink.anomalies or watch.done():
            break
        await asyncio.sleep(0.02)
    fake.set_job_state("1001", JobState.FAILED, exit_code="1:0")
    await asyncio.wait_for(watch, 10)
    return sink


async def test_without_a_predecessor_watch_the_old_attempts_lines_stay_theirs(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1001.out"
    log.write_text("iteration 1/ 100 | elapsed time per iteration (ms): 100.0\n" + OLD + "\n")
    launcher = Launcher()
    sink = await watch_second_attempt(log, launcher)
    assert launcher.asked == [0]
    evidence = [line for a in sink.anomalies for line in a.evidence]
    assert not any("Watchdog caught collective" in line for line in evidence)
    assert any(NEW in line for line in evidence)  # this attempt's own line is still read
    assert {a.job_attempt for a in sink.anomalies} == {1}


async def test_with_the_predecessors_cursor_reading_starts_there(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1001.out"
    first = "iteration 1/ 100 | elapsed time per iteration (ms): 100.0\n"
    log.write_text(first + OLD + "\n")
    stat = log.stat()
    # The predecessor stopped after the progress line: the NCCL line is unread, so it is read now.
    handed = TailCursor(path=str(log), inode=stat.st_ino, device=stat.st_dev, offset=len(first), line_no=1)
    sink = await watch_second_attempt(log, Launcher((handed,)))
    evidence = [line for a in sink.anomalies for line in a.evidence]
    assert any("Watchdog caught collective" in line for line in evidence)
