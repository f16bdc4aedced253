"""`scontrol show job/node -o` parsing against output recorded from the Slurm 22.05 lab."""

from pathlib import Path

import pytest

from goodput.scheduler import JobState
from goodput.slurm import records
from goodput.slurm.errors import AmbiguousRecordError, SlurmRecordError
from goodput.slurm.records import (
    job_from_record,
    job_state,
    node_from_record,
    node_state,
    split_record,
    split_records,
    to_int,
)
from goodput.slurm.unambiguous import job_record, node_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def record(name: str) -> dict[str, str]:
    return split_record((FIXTURES / name).read_text())


def test_running_job_has_everything_recovery_needs() -> None:
    job = job_from_record(record("scontrol-job-running-22.05.txt"))
    assert job.job_id == "8"
    assert job.name == "train-llm"
    assert job.state is JobState.RUNNING
    assert job.partition == "gpu"
    assert job.nodes == ("node1", "node2")
    assert job.comment == "goodput:opt-in team=ml"  # a value with spaces and '=' survives
    assert job.requeue is True
    assert job.restart_count == 0
    assert job.stdout_path == "/tmp/gpsl-scratch/out-8.log"
    assert job.command == "/tmp/gpsl-scratch/job.sh"
    assert job.held is False


def test_running_job_raw_fields_used_for_resubmission() -> None:
    raw = record("scontrol-job-running-22.05.txt")
    assert raw["NumNodes"] == "2"
    assert raw["TimeLimit"] == "2-00:00:00"
    assert raw["TresPerNode"] == "gres:gpu:1"
    assert raw["CPUs/Task"] == "1"
    assert raw["AllocNode:Sid"].startswith("localhost:")
    assert raw["BatchFlag"] == "1"


def test_a_jobs_own_reservation_is_read_and_none_is_empty() -> None:
    running = record("scontrol-job-running-22.05.txt")
    assert job_from_record(running).reservation == ""  # scontrol prints no Reservation= without one
    assert job_from_record({**running, "Reservation": "hero-run"}).reservation == "hero-run"
    assert job_from_record({**running, "Reservation": "(null)"}).reservation == ""


def test_held_job() -> None:
    job = job_from_record(record("scontrol-job-held-22.05.txt"))
    assert job.state is JobState.PENDING
    assert job.held is True
    assert job.state_reason == "JobHeldUser"
    assert job.nodes == ()


def test_requeued_job_pending_on_begin_time() -> None:
    job = job_from_record(record("scontrol-job-requeued-pending-22.05.txt"))
    assert job.state is JobState.PENDING
    assert job.state_reason == "BeginTime"
    assert job.restart_count == 1
    assert job.held is False


def test_completing_requeue_is_told_apart_from_completing_cancel() -> None:
    requeued = job_from_record(record("scontrol-job-requeue-completing-22.05.txt"))
    cancelled = job_from_record(record("scontrol-job-cancel-completing-22.05.txt"))
    assert requeued.state is JobState.REQUEUED
    assert requeued.restart_count == 1
    assert cancelled.state is JobState.COMPLETING


def test_excluded_nodes_and_wrap_job() -> None:
    job = job_from_record(record("scontrol-job-wrap-excluded-22.05.txt"))
    assert job.excluded_nodes == ("node4",)
    assert job.requeue is False
    assert job.command == ""  # --wrap jobs have Command=(null)


def test_cancelled_job() -> None:
    job = job_from_record(record("scontrol-job-cancelled-22.05.txt"))
    assert job.state is JobState.CANCELLED


def test_all_jobs_one_record_per_line() -> None:
    jobs = [job_from_record(r) for r in split_records((FIXTURES / "scontrol-jobs-all-22.05.txt").read_text())]
    assert len(jobs) == 12
    assert len({j.job_id for j in jobs}) == 12


def test_nodes_with_drain_reasons_and_setters() -> None:
    nodes = {n.name: n for n in (node_from_record(r) for r in
                                 split_records((FIXTURES / "scontrol-nodes-all-22.05.txt").read_text()))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node1"].state == "MIXED" and not nodes["node1"].drained
    assert nodes["node1"].gres == "gpu:8"
    drained = nodes["node3"]
    assert drained.drained and drained.flags == ("DRAIN",)
    assert drained.reason == "goodput:inc-7f3a: xid 79 on GPU 3"
    assert drained.reason_user == "root"
    down = nodes["node4"]
    assert down.state == "DOWN" and not down.drained
    assert down.reason == "admin: fan replaced, do not use"


def test_reason_with_key_like_words_is_kept_whole() -> None:
    raw = split_record("NodeName=n1 State=IDLE+DRAIN Reason=Xid 79 GPU=3 [alice@2026-01-01T00:00:00] Comment=x")
    node = node_from_record(raw)
    assert node.reason == "Xid 79 GPU=3"
    assert node.reason_user == "alice"


@pytest.mark.parametrize(("raw", "state", "flags"), [
    ("IDLE", "IDLE", ()),
    ("IDLE+DRAIN", "IDLE", ("DRAIN",)),
    ("MIXED+DRAIN", "MIXED", ("DRAIN",)),
    ("DOWN*+DRAIN", "DOWN", ("NOT_RESPONDING", "DRAIN")),
    ("IDLE*", "IDLE", ("NOT_RESPONDING",)),
    ("drained", "IDLE", ("DRAIN",)),
    ("", "UNKNOWN", ()),
])
def test_node_state(raw: str, state: str, flags: tuple[str, ...]) -> None:
    assert node_state(raw) == (state, flags)


@pytest.mark.parametrize(("raw", "state"), [
    ("RUNNING", JobState.RUNNING),
    ("CANCELLED by 0", JobState.CANCELLED),
    ("REQUEUE_HOLD", JobState.REQUEUED),
    ("NODE_FAIL", JobState.NODE_FAIL),
    ("SOMETHING_NEW", JobState.UNKNOWN),
])
def test_job_state(raw: str, state: JobState) -> None:
    assert job_state(raw) is state


# -- records a job's own text cannot rewrite (goodput.slurm.unambiguous) -----------------------

RUNNING_LINE = (FIXTURES / "scontrol-job-running-22.05.txt").read_text()
REAL_COMMENT = "Comment=goodput:opt-in team=ml "


def with_comment(comment: str, line: str = RUNNING_LINE) -> str:
    assert REAL_COMMENT in line
    return line.replace(REAL_COMMENT, f"Comment={comment} ")


def interactive(line: str = RUNNING_LINE) -> str:
    """The running fixture as `salloc` would print it: BatchFlag=0 and no StdErr/StdIn/StdOut."""
    head, _, tail = line.partition(" StdErr=")
    return head.replace("BatchFlag=1", "BatchFlag=0") + " Power=" + tail.partition(" Power=")[2]


@pytest.mark.parametrize("forged", [
    "goodput:opt-in JobId=999", "x UserId=root(0)", "x GroupId=root(0)", "x NodeList=node4",
    "x Partition=allowlisted", "x StdOut=/etc/shadow", "x StdErr=/etc/shadow", "x Restarts=5",
    "x Requeue=0", "x BatchFlag=0", "x ExcNodeList=node1", "x ReqNodeList=node9", "x WorkDir=/root",
    "x JobState=CANCELLED", "goodput:opt-in team=ml JobId=999 UserId=root(0) NodeList=node4",
])
def test_a_comment_cannot_forge_a_key(forged: str) -> None:
    line = with_comment(forged)
    with pytest.raises(AmbiguousRecordError):
        split_record(line)  # no "later duplicates win"
    with pytest.raises(AmbiguousRecordError):
        job_record(line, "8")


def test_a_job_name_cannot_forge_keys_either() -> None:
    line = RUNNING_LINE.replace("JobName=train-llm ", "JobName=n JobId=1 UserId=root(0) ")
    with pytest.raises(AmbiguousRecordError):
        job_record(line, "8")


@pytest.mark.parametrize("forged", ["x ArrayJobId=5 ArrayTaskId=1", "x Reservation=r", "x HetJobId=3 HetJobOffset=0"])
def test_a_key_slurm_prints_earlier_is_out_of_order(forged: str) -> None:
    with pytest.raises(AmbiguousRecordError, match="order"):
        job_record(with_comment(forged), "8")


@pytest.mark.parametrize("forged", ["x Team=ml", "x Foo=1"])
def test_a_key_slurm_never_prints_makes_the_record_ambiguous(forged: str) -> None:
    with pytest.raises(AmbiguousRecordError, match="not a key"):
        job_record(with_comment(forged), "8")


def test_a_newline_in_a_comment_is_not_a_second_record() -> None:
    forged = with_comment("c\nJobId=8 JobName=x UserId=root(0) GroupId=root(0)")
    with pytest.raises(AmbiguousRecordError, match="lines"):
        job_record(forged, "8")


def test_output_paths_of_an_interactive_job_can_only_be_forged() -> None:
    assert job_record(interactive(), "8")["BatchFlag"] == "0"
    with pytest.raises(AmbiguousRecordError, match="not a batch job"):
        job_record(interactive(with_comment("x StdOut=/etc/shadow")), "8")


def test_an_output_path_that_may_run_into_optional_keys_is_left_out() -> None:
    # `--output="/etc/shadow BurstBuffer=x"` prints like a job with a burst buffer
    line = RUNNING_LINE.replace("StdOut=/tmp/gpsl-scratch/out-8.log ", "StdOut=/etc/shadow BurstBuffer=x ")
    record = job_record(line, "8")
    assert "StdOut" not in record
    assert job_from_record(record).stdout_path == ""
    assert job_record(RUNNING_LINE, "8")["StdOut"] == "/tmp/gpsl-scratch/out-8.log"


def test_the_record_must_be_the_job_asked_for() -> None:
    with pytest.raises(SlurmRecordError, match="asked for 9"):
        job_record(RUNNING_LINE, "9")
    assert job_record(RUNNING_LINE, "8")["JobId"] == "8"


@pytest.mark.parametrize(("key", "value"), [
    ("Restarts", "9" * 5000), ("JobId", "8" * 5000), ("NodeList", "node[1-" + "9" * 5000 + "]"),
    ("ExitCode", "1" * 5000 + ":0"), ("NumNodes", "2" * 5000), ("Priority", "1" * 5000),
    ("TRES", "cpu=1,node=" + "2" * 5000), ("NtasksPerN:B:S:C", "9" * 5000 + ":0:*:*"),
])
def test_huge_numbers_are_a_typed_error(key: str, value: str) -> None:
    line = " ".join(f"{key}={value}" if token.startswith(f"{key}=") else token
                    for token in RUNNING_LINE.split(" "))
    with pytest.raises(SlurmRecordError):
        job_record(line, "8")
    assert to_int("9" * 5000) == 0 and to_int("12") == 12


def test_huge_hostlists_are_a_typed_error_when_converting() -> None:
    with pytest.raises(SlurmRecordError):
        job_from_record({"JobId": "8", "NodeList": "a[1-99999]b[1-99999]"})


def test_node_record_is_the_node_asked_for_and_its_reason_forges_nothing() -> None:
    line = next(line for line in (FIXTURES / "scontrol-nodes-all-22.05.txt").read_text().splitlines()
                if line.startswith("NodeName=node3 "))
    assert node_from_record(node_record(line, "node3")).reason == "goodput:inc-7f3a: xid 79 on GPU 3"
    with pytest.raises(SlurmRecordError, match="asked for node4"):
        node_record(line, "node4")
    forged = line.replace("xid 79 on GPU 3", "x State=IDLE NodeName=node1 [root@2020-01-01T00:00:00] y")
    node = node_from_record(node_record(forged, "node3"))
    assert node.name == "node3" and node.drained
    assert node.reason == "goodput:inc-7f3a: x State=IDLE NodeName=node1 [root@2020-01-01T00:00:00] y"
    with pytest.raises(AmbiguousRecordError):
        node_record(line.replace("State=IDLE+DRAIN", "State=IDLE+DRAIN Extra=x State=IDLE"), "node3")


def test_splitting_is_linear_in_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """About 1 MB of spaces and key-like tokens: each token's key is looked at through a prefix
    of at most MAX_KEY + 1 characters, once, so the work is bounded by the line's length."""
    calls: list[int] = []
    original = records._key_of

    def counting(prefix: str) -> str | None:
        calls.append(len(prefix))
        return original(prefix)

    monkeypatch.setattr(records, "_key_of", counting)
    line = "JobId=8 Comment=" + ("  " * 150_000) + " ".join(f"x{i}=y" for i in range(60_000)) + " A" * 150_000
    assert len(line) > 1_000_000
    pairs = records.record_pairs(line)
    tokens = line.count(" ") + 1
    assert len(calls) == tokens  # one look per token, never a rescan
    assert max(calls) <= records.MAX_KEY + 1
    assert sum(calls) <= 2 * len(line)
    assert [k for k, _ in pairs] == ["JobId", "Comment"]


RUNNING_26_05 = (FIXTURES / "scontrol-job-running-26.05.txt").read_text()


def test_a_26_05_record_reads_with_its_submit_line_and_an_empty_stderr() -> None:
    # 26.05 (its lab, 2026-12-06) adds Exclusive and SubmitLine (the sbatch command line, the
    # owner's free text) and prints `StdErr=` empty when errors go with the output
    record = job_record(RUNNING_26_05, "1")
    assert (record["JobState"], record["Restarts"], record["NodeList"]) == ("RUNNING", "0", "node[1-2]")
    assert record["SubmitLine"].startswith("sbatch --parsable --comment=goodput:opt-in")
    assert record["StdErr"] == "" and record["Exclusive"] == "NO"


@pytest.mark.parametrize("forged", [" JobState=COMPLETED", " WorkDir=/root", " NodeList=node4", " Restarts=9",
                                    " Exclusive=YES"])
def test_a_submit_line_cannot_forge_a_key(forged: str) -> None:
    line = RUNNING_26_05.replace("--wrap sleep 300 ", f"--wrap sleep 300{forged} ", 1)
    assert line != RUNNING_26_05
    with pytest.raises(AmbiguousRecordError):
        job_record(line, "1")
