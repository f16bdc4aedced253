"""A job's JSON object as the record resubmission reads: same options as the text would give."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from goodput.slurm.jsonout import SlurmJsonError
from goodput.slurm.jsonrecord import record_from_json
from goodput.slurm.records import job_from_record
from goodput.slurm.resubmit import options_from_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def job(name: str, index: int = 0) -> dict[str, Any]:
    jobs: list[dict[str, Any]] = json.loads((FIXTURES / name).read_text())["jobs"]
    return jobs[index]


def test_a_2205_job_gives_the_options_and_owner_of_its_record() -> None:
    record = record_from_json(job("squeue-22.05.json"))
    options = options_from_record(record, token="T")
    for expected in ("--job-name=train", "--partition=gpu", "--nodes=2", "--ntasks=2", "--gres=gpu:1",
                     "--chdir=/tmp", "--output=/tmp/gp/out-%j.log", "--error=/tmp/gp/err-%j.log", "--requeue",
                     "--time=365-00:00:00"):
        assert expected in options, (expected, options)
    assert any(o.startswith("--comment=goodput:resubmit-of=1:T") for o in options)
    owner = job_from_record(record)
    assert (owner.user, owner.user_id, owner.group_id) == ("root", 0, 0)


def test_a_2411_job_with_wrapped_numbers_reads_the_same_way() -> None:
    record = record_from_json(job("squeue-24.11-synthetic.json"))
    assert (record["JobId"], record["NumNodes"], record["Partition"], record["Requeue"]) == ("101", "2", "gpu", "1")
    assert "--nodes=2" in options_from_record(record, token="T")


def test_unset_limits_are_left_out_as_scontrol_leaves_them_null() -> None:
    unset = {**job("squeue-22.05.json"), "time_limit": 0xFFFFFFFE, "memory_per_node": 0xFFFFFFFF,
             "tasks_per_node": 0}
    record = record_from_json(unset)
    assert not {"TimeLimit", "MinMemoryNode", "NtasksPerN:B:S:C"} & set(record)
    options = options_from_record(record, token="T")
    assert not [o for o in options if o.startswith(("--time", "--mem"))]


def test_the_owners_key_like_comment_is_only_a_comment() -> None:
    forged = {**job("squeue-22.05.json"), "comment": "goodput:opt-in JobId=999 UserId=alice(1001) Partition=x"}
    record = record_from_json(forged)
    assert (record["JobId"], record["UserId"], record["Partition"]) == ("1", "root(0)", "gpu")


@pytest.mark.parametrize("field,value", [("name", ["a"]), ("tres_per_node", {"gpu": 1}), ("job_state", [1])])
def test_a_field_of_the_wrong_type_is_a_json_error(field: str, value: object) -> None:
    with pytest.raises(SlurmJsonError):
        record_from_json({**job("squeue-22.05.json"), field: value})
