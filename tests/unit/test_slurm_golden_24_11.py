"""goodput's Slurm parsers on output recorded from a real Slurm 24.11.5 (Debian 13), not hand-written.

tests/fixtures/slurm/24.11/ was recorded by scripts/slurm-lab/record-fixtures.sh on the lab
inside a trixie root (`up.sh --slurm 24.11`): job 1 a running 2-node `--requeue` job with a
comment and gres, 2 a `--no-requeue --exclude=node4` job, 3 a held job, 4 a requeued 2-node job
still completing, 5 a cancelled one; node3 drained by goodput, node4 downed by an admin. The JSON
is data_parser v0.0.42; the key=value text is the form resubmission and `get_job` trust.
"""

from pathlib import Path

import pytest

from goodput.scheduler import (
    ACTIVE_JOB_STATES,
    JobState,
    PermanentSchedulerError,
    UnknownJobError,
    UnknownNodeError,
)
from goodput.slurm.errors import classify
from goodput.slurm.jsonout import find_job, load, parse_sinfo_json, parse_squeue_json, slurm_release
from goodput.slurm.records import job_from_record, node_from_record, split_record, split_records

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "24.11"
DRAIN = "goodput:inc-7f3a: xid 79 on GPU 3"


def read(name: str) -> str:
    return (GOLDEN / name).read_text()


def test_squeue_json_v0_0_42() -> None:
    raw = read("squeue-24.11.json")
    assert load(raw)["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.42"
    assert slurm_release(load(raw)) == "24.11.5"
    jobs = {j.job_id: j for j in parse_squeue_json(raw)}
    assert sorted(jobs) == ["1", "2", "3", "4"]  # the cancelled job 5 had left squeue
    assert jobs["1"].state is JobState.RUNNING and jobs["1"].nodes == ("node1", "node2")
    assert jobs["1"].comment == "goodput:opt-in team=ml" and jobs["1"].requeue
    assert jobs["1"].stdout_path.endswith("/out-1.log") and (jobs["1"].user, jobs["1"].user_id) == ("root", 0)
    assert jobs["2"].excluded_nodes == ("node4",) and not jobs["2"].requeue
    assert jobs["3"].held and jobs["3"].state is JobState.PENDING and jobs["3"].state_reason == "JobHeldUser"
    # a requeued job still completing: ["PENDING", "COMPLETING"] in 24.11's JSON
    assert jobs["4"].state is JobState.PENDING and jobs["4"].restart_count == 1
    assert all(j.exit_code == "0:0" for j in jobs.values())


@pytest.mark.parametrize("name", ["sinfo-24.11.json", "scontrol-nodes-24.11.json"])
def test_node_json_v0_0_42(name: str) -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read(name))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node3"].drained and nodes["node3"].state == "IDLE"
    assert (nodes["node3"].reason, nodes["node3"].reason_user) == (DRAIN, "root")
    assert nodes["node4"].state == "DOWN" and nodes["node4"].reason == "admin: fan replaced, do not use"
    assert not nodes["node1"].drained and nodes["node1"].state == "MIXED"
    assert all(n.gres == "gpu:8" for n in nodes.values())


@pytest.mark.parametrize(("name", "job_id"), [("scontrol-job-running-24.11.json", "1"),
                                              ("scontrol-job-held-24.11.json", "3"),
                                              ("scontrol-job-requeued-24.11.json", "4")])
def test_scontrol_json_job_matches_squeue(name: str, job_id: str) -> None:
    job = find_job(load(read(name)), job_id)
    assert job == {j.job_id: j for j in parse_squeue_json(read("squeue-24.11.json"))}[job_id]


def test_scontrol_text_jobs() -> None:
    running = job_from_record(split_record(read("scontrol-job-running-24.11.txt")))
    assert running.state is JobState.RUNNING and running.nodes == ("node1", "node2")
    assert running.comment == "goodput:opt-in team=ml" and running.requeue and running.partition == "gpu"
    excluded = job_from_record(split_record(read("scontrol-job-wrap-excluded-24.11.txt")))
    assert excluded.excluded_nodes == ("node4",) and not excluded.requeue
    held = job_from_record(split_record(read("scontrol-job-held-24.11.txt")))
    assert held.held and held.state is JobState.PENDING
    cancelled = job_from_record(split_record(read("scontrol-job-cancelled-24.11.txt")))
    assert cancelled.state is JobState.CANCELLED and cancelled.exit_code == "0:15"
    # the text says COMPLETING with EndTime=Unknown (as on 22.05): read as REQUEUED, where the
    # JSON above says PENDING; both are active, which is what every caller decides on
    requeued = job_from_record(split_record(read("scontrol-job-requeue-completing-2node-24.11.txt")))
    assert requeued.state is JobState.REQUEUED and requeued.restart_count == 1
    assert requeued.state in ACTIVE_JOB_STATES and JobState.PENDING in ACTIVE_JOB_STATES
    every = {j.job_id for j in map(job_from_record, split_records(read("scontrol-jobs-all-24.11.txt")))}
    assert every == {"1", "2", "3", "4", "5"}


def test_scontrol_text_nodes() -> None:
    nodes = {n.name: n for n in map(node_from_record, split_records(read("scontrol-nodes-all-24.11.txt")))}
    assert nodes["node3"].drained and (nodes["node3"].reason, nodes["node3"].reason_user) == (DRAIN, "root")
    assert nodes["node4"].state == "DOWN" and not nodes["node1"].drained
    assert nodes["node1"].flags == ("COMPLETING",)


def test_errors_classify_as_on_22_05() -> None:
    unknown_job = read("errors-unknown-job-24.11.txt").splitlines()
    assert unknown_job and all(isinstance(classify(["scontrol", "show"], 1, "", line), UnknownJobError)
                               for line in unknown_job)
    unknown_node = read("errors-unknown-node-24.11.txt").splitlines()
    assert unknown_node and all(isinstance(classify(["scontrol", "show"], 1, line, ""), UnknownNodeError)
                                for line in unknown_node)
    disabled = classify(["scontrol", "requeue"], 1, "", read("errors-requeue-disabled-24.11.txt"))
    assert type(disabled) is PermanentSchedulerError and "presently disabled" in str(disabled)
