"""`squeue --json` / `sinfo --json` in the 22.05 (recorded) and 23.02+/24.11 (synthetic) shapes."""

import json
from pathlib import Path

import pytest

from goodput.scheduler import JobState, TransientSchedulerError, UnknownJobError
from goodput.slurm.jsonout import (
    SlurmJsonError,
    find_job,
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


# -- JSON is the fallback for forged text, so it must not be a way in either -----------------

SQUEUE = read("squeue-22.05.json")


def with_job(**fields: object) -> str:
    document = json.loads(SQUEUE)
    document["jobs"][0].update(fields)
    return json.dumps(document)


@pytest.mark.parametrize("raw", [
    '{"jobs": [{"job_id": 1' + "9" * 5000 + "}]}",  # ValueError in json.loads itself, before
    '{"jobs": [{"job_id": 1, "restart_cnt": ' + "9" * 50 + "}]}",
    '{"jobs": [{"job_id": 1, "restart_cnt": 1e999}]}',
    '{"jobs": [{"job_id": NaN}]}',
    '{"jobs": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"jobs": [' + '{"a":' * 5000 + "1" + "}" * 5000 + "]}",
])
def test_huge_numbers_and_deep_nesting_are_typed_errors(raw: str) -> None:
    with pytest.raises(SlurmJsonError):
        parse_squeue_json(raw)


@pytest.mark.parametrize("fields", [
    {"name": ["a", "list"]}, {"nodes": {"an": "object"}}, {"job_state": [1, 2]}, {"job_id": "7"},
    {"job_id": None}, {"comment": {"x": 1}}, {"nodes": "node[1-" + "9" * 40 + "]"},
    {"nodes": "a[1-99999]b[1-99999]"}, {"restart_cnt": [1]}, {"exit_code": {"return_code": [0]}},
])
def test_wrong_types_are_slurm_json_errors(fields: dict[str, object]) -> None:
    with pytest.raises(SlurmJsonError):
        parse_squeue_json(with_job(**fields))


@pytest.mark.parametrize("raw", ['{"jobs": [1, 2]}', '{"jobs": ["x"]}', '{"jobs": {"1": {}}}',
                                 '{"errors": [[[[]]]], "jobs": []}', '{"nodes": [null]}', '{"sinfo": [{"nodes": 1}]}',
                                 '{"sinfo": [{"nodes": {"nodes": [1]}}]}', '{"nodes": [{"name": 1, "state": {}}]}'])
def test_odd_shapes_are_typed_errors(raw: str) -> None:
    parse = parse_sinfo_json if ("nodes" in raw or "sinfo" in raw) else parse_squeue_json
    with pytest.raises((SlurmJsonError, TransientSchedulerError)):
        parse(raw)


def test_find_job_takes_the_job_with_the_id_never_the_first() -> None:
    document = load(SQUEUE)
    assert find_job(document, "9").job_id == "9"
    with pytest.raises(UnknownJobError):
        find_job(document, "99")
    arrays = {"jobs": [{"job_id": 40, "array_job_id": 38, "array_task_id": 2, "job_state": "RUNNING"},
                       {"job_id": 41, "het_job_id": 41, "het_job_offset": 1, "job_state": "RUNNING"}]}
    assert find_job(arrays, "38_2").job_id == "40"
    assert find_job(arrays, "41+1").job_id == "41"
    with pytest.raises(UnknownJobError):
        find_job(arrays, "38_3")


def test_22_05_output_patterns_expand_as_scontrol_prints_them() -> None:
    document = load(SQUEUE)
    job8 = find_job(document, "8", expand_output=True)
    assert job8.stdout_path == job8.stderr_path == "/tmp/gpsl-scratch/out-8.log"
    assert find_job(document, "9", expand_output=True).stdout_path == "/dev/null"
    defaulted = load(with_job(standard_output="", standard_error="", current_working_directory="/w"))
    first = defaulted["jobs"][0]["job_id"]
    assert find_job(defaulted, str(first), expand_output=True).stdout_path == f"/w/slurm-{first}.out"
    patterned = load(with_job(standard_output="logs/%x-%5j-%u-%%.out", name="train", user_name="alice",
                              current_working_directory="/tmp/gp"))
    job_id = patterned["jobs"][0]["job_id"]
    assert (find_job(patterned, str(job_id), expand_output=True).stdout_path
            == f"/tmp/gp/logs/train-{job_id:05d}-alice-%.out")
    assert find_job(load(read("squeue-24.11-synthetic.json")), "101", expand_output=True).stdout_path == \
        "/work/out-101.log"


@pytest.mark.parametrize("meta", [{"Slurm": {"version": {"major": "9" * 5000, "minor": 1}}},
                                  {"slurm": {"version": {"major": 24, "minor": "x"}}}, {"Slurm": []}, []])
def test_slurm_release_of_odd_meta_is_empty(meta: object) -> None:
    assert slurm_release({"meta": meta}) == ""
