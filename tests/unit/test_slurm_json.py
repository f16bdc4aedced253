"""`squeue --json` / `sinfo --json` in the 22.05 (recorded) and 23.02+/24.11 (synthetic) shapes."""

from pathlib import Path

import pytest

from goodput.scheduler import JobState, TransientSchedulerError
from goodput.slurm.jsonout import (
    SlurmJsonError,
    load,
    number,
    parse_sinfo_json,
    parse_squeue_json,
    slurm_release,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_squeue_22_05_matches_scontrol_view() -> None:
    jobs = {j.job_id: j for j in parse_squeue_json(read("squeue-22.05.json"))}
    train = jobs["8"]
    assert train.state is JobState.RUNNING
    assert train.nodes == ("node1", "node2")
    assert train.comment == "goodput:opt-in team=ml"
    assert train.requeue is True
    assert train.stdout_path == "/tmp/gpsl-scratch/out-%j.log"  # squeue keeps the pattern
    assert jobs["10"].held is True and jobs["10"].state is JobState.PENDING
    assert jobs["9"].excluded_nodes == ("node4",)
    assert jobs["11"].restart_count == 1
    assert jobs["12"].state is JobState.CANCELLED


def test_squeue_shared_sample_22_05() -> None:
    jobs = parse_squeue_json(read("squeue-22.05-shared-sample.json"))
    assert jobs and all(j.job_id.isdigit() for j in jobs)
    assert slurm_release(load(read("squeue-22.05-shared-sample.json"))) == "22.05.8"


def test_squeue_24_11_shape() -> None:
    jobs = {j.job_id: j for j in parse_squeue_json(read("squeue-24.11-synthetic.json"))}
    assert jobs["101"].state is JobState.RUNNING
    assert jobs["101"].nodes == ("node1", "node2")
    assert jobs["101"].exit_code == "0:0"
    assert jobs["102"].held is True
    assert jobs["103"].state is JobState.PENDING and jobs["103"].restart_count == 1
    assert jobs["103"].excluded_nodes == ("node3", "node4")
    assert jobs["104"].state is JobState.CANCELLED and jobs["104"].exit_code == "0:15"
    assert slurm_release(load(read("squeue-24.11-synthetic.json"))) == "24.11.1"


def test_sinfo_22_05() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read("sinfo-22.05.json"))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node3"].drained
    assert nodes["node3"].reason == "goodput:inc-7f3a: xid 79 on GPU 3"
    assert nodes["node3"].reason_user == "root"
    assert nodes["node4"].state == "DOWN"
    assert nodes["node1"].gres == "gpu:8"


def test_sinfo_shared_sample_22_05() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read("sinfo-22.05-shared-sample.json"))}
    assert nodes["node2"].drained and not nodes["node1"].drained


def test_sinfo_24_11_groups_become_one_node_each() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read("sinfo-24.11-synthetic.json"))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node3"].drained and nodes["node3"].state == "IDLE"
    assert nodes["node3"].reason == "goodput:inc-7f3a: xid 79"
    assert nodes["node3"].reason_user == "root"
    assert nodes["node4"].flags == ("NOT_RESPONDING",)
    assert nodes["node1"].gres == "gpu:8"


def test_scontrol_nodes_json_24_11() -> None:
    nodes = {n.name: n for n in parse_sinfo_json(read("scontrol-nodes-24.11-synthetic.json"))}
    assert nodes["node4"].drained and nodes["node4"].reason_user == "alice"
    assert nodes["node4"].flags == ("DRAIN", "NOT_RESPONDING")


@pytest.mark.parametrize("name", ["squeue-controller-down-22.05.json", "sinfo-controller-down-22.05.json"])
def test_controller_down_is_transient_not_an_empty_cluster(name: str) -> None:
    parse = parse_squeue_json if name.startswith("squeue") else parse_sinfo_json
    with pytest.raises(TransientSchedulerError):
        parse(read(name))


@pytest.mark.parametrize("raw", ["", "not json", "[]", '{"meta": {}}'])
def test_garbage_is_an_error(raw: str) -> None:
    with pytest.raises(SlurmJsonError):
        parse_squeue_json(raw)


@pytest.mark.parametrize(("value", "expected"), [
    (3, 3), ({"set": True, "infinite": False, "number": 7}, 7),
    ({"set": False, "infinite": False, "number": 7}, 0), ({"set": True, "infinite": True, "number": 0}, 0),
    ("12", 12), (None, 0), (True, 1),
])
def test_number(value: object, expected: int) -> None:
    assert number(value) == expected
