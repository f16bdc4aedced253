"""Ranks that never enqueued the collective the others timed out in (PyTorch's per-rank progress
after a timeout): named, read as the program's, not restarted unchanged; nothing inferred from
ranks that printed nothing, from another process group, or from a number a line cannot hold."""

from __future__ import annotations

from goodput.diagnose.classify import classify_lines
from goodput.models import Category

TIMEOUT = ("[rank{r}]:[E623 11:25:20.4 ProcessGroupNCCL.cpp:704] [Rank {r}] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
           "600003 milliseconds before timing out.")
STATUS = ("[rank{r}]:[E623 11:25:20.5 ProcessGroupNCCL.cpp:2357] [PG ID {pg} PG GUID 0(default_pg) Rank {r}]  "
          "failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {enq}, "
          "last completed work: {done}")
DUMP = ("[rank{r}]:[E623 11:25:20.4 ProcessGroupNCCL.cpp:1827] [PG ID {pg} PG GUID 0(default_pg) Rank {r}] "
        "Received a dump signal due to a collective timeout from  rank 10 and we will try our best to dump the "
        "debug info. Last enqueued NCCL work: {enq}, last completed NCCL work: {done}.This is most likely caused "
        "by incorrect usages of collectives")


def test_ranks_that_never_enqueued_the_timed_out_collective_are_named_and_not_restarted() -> None:
    log = [TIMEOUT.format(r=8, seq=167), TIMEOUT.format(r=14, seq=167),
           STATUS.format(r=14, pg=0, seq=167, enq=167, done=166),
           DUMP.format(r=2, pg=0, enq=166, done=166), DUMP.format(r=5, pg=0, enq=166, done=166)]
    v = classify_lines(log)
    assert v.category is Category.APP_ERROR and not v.restart and not v.drain
    assert v.culprit == "ranks 2, 5"
    assert "nccl-ranks-behind" in v.signatures
    assert v.confidence != "high"


def test_ranks_caught_up_with_the_collective_name_nobody() -> None:
    # Every rank enqueued the collective: they all wait in it, and the timeout says nothing of who is behind.
    log = [TIMEOUT.format(r=1, seq=80), DUMP.format(r=0, pg=0, enq=80, done=79)]
    v = classify_lines(log)
    assert "nccl-ranks-behind" not in v.signatures
    assert v.restart


def test_progress_in_another_process_group_is_not_compared() -> None:
    log = ["[PG ID 3 PG GUID 3 Rank 1] " + TIMEOUT.format(r=1, seq=500).split("] ", 1)[1].replace(
               "[Rank 1] Watchdog", "Watchdog"),
           "[PG ID 0 PG GUID 0 Rank 2] " + TIMEOUT.format(r=2, seq=900).split("] ", 1)[1].replace(
               "[Rank 2] Watchdog", "Watchdog"),
           DUMP.format(r=4, pg=7, enq=12, done=12)]
    assert "nccl-ranks-behind" not in classify_lines(log).signatures


def test_a_number_no_counter_reaches_is_ignored() -> None:
    log = [TIMEOUT.format(r=1, seq=200), DUMP.format(r=3, pg=0, enq="9" * 40, done=1)]
    assert "nccl-ranks-behind" not in classify_lines(log).signatures
    # Nor a sequence number of thousands of digits, which would make every rank look behind.
    log = [TIMEOUT.format(r=1, seq="9" * 5000), DUMP.format(r=3, pg=0, enq=12, done=12)]
    assert "nccl-ranks-behind" not in classify_lines(log).signatures


def test_one_timed_out_group_is_not_compared_with_another_groups_progress() -> None:
    log = ["[PG ID 0 PG GUID 0 Rank 2] " + TIMEOUT.format(r=2, seq=900).split("] ", 1)[1].replace(
               "[Rank 2] Watchdog", "Watchdog"),
           DUMP.format(r=4, pg=7, enq=12, done=12)]
    assert "nccl-ranks-behind" not in classify_lines(log).signatures
    log[1] = DUMP.format(r=4, pg=0, enq=12, done=12)
    assert "nccl-ranks-behind" in classify_lines(log).signatures
