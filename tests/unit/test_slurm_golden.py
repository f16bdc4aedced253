"""goodput's Slurm parsers on output recorded from real newer Slurm, not hand-written.

tests/fixtures/slurm/<version>/ (24.11.5 from Debian 13, 26.05.5 from sid) was recorded by
scripts/slurm-lab/record-fixtures.sh on the lab inside that version's root (`up.sh --slurm
VERSION`), the same scene for each: job 1 a running 2-node `--requeue` job with a
comment and gres, 2 a `--no-requeue --exclude=node4` job, 3 a held job, 4 a requeued 2-node job
still completing, 5 a cancelled one; node3 drained by goodput, node4 downed by an admin. The JSON
is data_parser v0.0.42 (24.11) and v0.0.45 (26.05); the key=value text is the form resubmission and `get_job` trust.
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

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
DRAIN = "goodput:inc-7f3a: xid 79 on GPU 3"
# version -> (release, data_parser) as recorded
RECORDED = {"24.11": ("24.11.5", "data_parser/v0.0.42"), "26.05": ("26.05.5", "data_parser/v0.0.45")}

STDOUT_AS_PRINTED = {"24.11": "/out-1.log", "26.05": "/out-%j.log"}


@pytest.fixture(params=sorted(RECORDED))
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def read(version: str, name: str) -> str:
    """`name` with VERSION replaced, from that version's recordings."""
    return (FIXTURES / version / name.replace("VERSION", version)).read_text()


def test_squeue_json(version: str) -> None:
    raw = read(version, "squeue-VERSION.json")
    release, parser = RECORDED[version]
    assert load(raw)["meta"]["plugin"]["data_parser"] == parser
    assert slurm_release(load(raw)) == release
    jobs = {j.job_id: j for j in parse_squeue_json(raw)}
    assert sorted(jobs) == ["1", "2", "3", "4"]  # the cancelled job 5 had left squeue
    assert jobs["1"].state is JobState.RUNNING and jobs["1"].nodes == ("node1", "node2")
    assert jobs["1"].comment == "goodput:opt-in team=ml" and jobs["1"].requeue
    assert (jobs["1"].user, jobs["1"].user_id) == ("root", 0)
    # squeue prints the submitted pattern on 26.05 (and 22.05) but expands it on 24.11;
    # expand_output (what REST reads use) gives the file on every version
    assert jobs["1"].stdout_path.endswith(STDOUT_AS_PRINTED[version])
    assert find_job(load(raw), "1", expand_output=True).stdout_path.endswith("/out-1.log")
    assert jobs["2"].excluded_nodes == ("node4",) and not jobs["2"].requeue
    assert jobs["3"].held and jobs["3"].state is JobState.PENDING and jobs["3"].state_reason == "JobHeldUser"
    # a requeued job still completing: ["PENDING", "COMPLETING"] in the JSON
    assert jobs["4"].state is JobState.PENDING and jobs["4"].restart_count == 1
    assert all(j.exit_code == "0:0" for j in jobs.values())


@pytest.mark.parametrize("name", ["sinfo-VERSION.json", "scontrol-nodes-VERSION.json"])
def test_node_json(version: str, name: str) -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read(version, name))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node3"].drained and nodes["node3"].state == "IDLE"
    assert (nodes["node3"].reason, nodes["node3"].reason_user) == (DRAIN, "root")
    assert nodes["node4"].state == "DOWN" and nodes["node4"].reason == "admin: fan replaced, do not use"
    assert not nodes["node1"].drained and nodes["node1"].state == "MIXED"
    assert all(n.gres == "gpu:8" for n in nodes.values())


@pytest.mark.parametrize(("name", "job_id"), [("scontrol-job-running-VERSION.json", "1"),
                                              ("scontrol-job-held-VERSION.json", "3"),
                                              ("scontrol-job-requeued-VERSION.json", "4")])
def test_scontrol_json_job_matches_squeue(version: str, name: str, job_id: str) -> None:
    job = find_job(load(read(version, name)), job_id)
    assert job == {j.job_id: j for j in parse_squeue_json(read(version, "squeue-VERSION.json"))}[job_id]


def test_scontrol_text_jobs(version: str) -> None:
    running = job_from_record(split_record(read(version, "scontrol-job-running-VERSION.txt")))
    assert running.state is JobState.RUNNING and running.nodes == ("node1", "node2")
    assert running.comment == "goodput:opt-in team=ml" and running.requeue and running.partition == "gpu"
    excluded = job_from_record(split_record(read(version, "scontrol-job-wrap-excluded-VERSION.txt")))
    assert excluded.excluded_nodes == ("node4",) and not excluded.requeue
    held = job_from_record(split_record(read(version, "scontrol-job-held-VERSION.txt")))
    assert held.held and held.state is JobState.PENDING
    cancelled = job_from_record(split_record(read(version, "scontrol-job-cancelled-VERSION.txt")))
    assert cancelled.state is JobState.CANCELLED and cancelled.exit_code == "0:15"
    # the text says COMPLETING with EndTime=Unknown (as on 22.05): read as REQUEUED, where the
    # JSON above says PENDING; both are active, which is what every caller decides on
    requeued = job_from_record(split_record(read(version, "scontrol-job-requeue-completing-2node-VERSION.txt")))
    assert requeued.state is JobState.REQUEUED and requeued.restart_count == 1
    assert requeued.state in ACTIVE_JOB_STATES and JobState.PENDING in ACTIVE_JOB_STATES
    every = {j.job_id for j in map(job_from_record, split_records(read(version, "scontrol-jobs-all-VERSION.txt")))}
    assert every == {"1", "2", "3", "4", "5"}


def test_scontrol_text_nodes(version: str) -> None:
    nodes = {n.name: n for n in map(node_from_record, split_records(read(version, "scontrol-nodes-all-VERSION.txt")))}
    assert nodes["node3"].drained and (nodes["node3"].reason, nodes["node3"].reason_user) == (DRAIN, "root")
    assert nodes["node4"].state == "DOWN" and not nodes["node1"].drained
    assert nodes["node1"].flags == ("COMPLETING",)


def test_errors_classify_as_on_22_05(version: str) -> None:
    unknown_job = read(version, "errors-unknown-job-VERSION.txt").splitlines()
    assert unknown_job and all(isinstance(classify(["scontrol", "show"], 1, "", line), UnknownJobError)
                               for line in unknown_job)
    unknown_node = read(version, "errors-unknown-node-VERSION.txt").splitlines()
    assert unknown_node and all(isinstance(classify(["scontrol", "show"], 1, line, ""), UnknownNodeError)
                                for line in unknown_node)
    disabled = classify(["scontrol", "requeue"], 1, "", read(version, "errors-requeue-disabled-VERSION.txt"))
    assert type(disabled) is PermanentSchedulerError and "presently disabled" in str(disabled)
