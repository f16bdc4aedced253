"""`scontrol show job/node -o` parsing against output recorded from the Slurm 22.05 lab."""

from pathlib import Path

import pytest

from goodput.scheduler import JobState
from goodput.slurm.records import (
    job_from_record,
    job_state,
    node_from_record,
    node_state,
    split_record,
    split_records,
)

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
