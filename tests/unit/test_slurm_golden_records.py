"""The record kinds the version matrix added, parsed from real output of every lab version.

Recorded by scripts/slurm-lab/record-more-fixtures.sh on the 22.05 lab (tests/fixtures/slurm/)
and the labs inside the trixie (24.11.5) and sid (26.05.5) roots (tests/fixtures/slurm/<version>/):
the hot-spare reservation `goodput-spares` as an operator creates it (node4, Users=root,
Flags=FLEX), after goodput's two updates (`Users+=goodput-alice`, `Nodes=node3,node4`) and when
there is none; job 2 pending on `afterok:1`; task 1 of array 3 running. These are what the
contract suite's reservation, dependency and array cells read on the live labs.
"""

from pathlib import Path

import pytest

from goodput.scheduler import JobState, ReservationInfo, UnknownReservationError
from goodput.slurm.jsonout import find_job, load
from goodput.slurm.records import job_from_record, split_record
from goodput.slurm.reservations import parse_reservation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
VERSIONS = ("22.05", "24.11", "26.05")
JSON_SINCE = ("24.11", "26.05")  # 22.05's scontrol has no --json
POOL = "goodput-spares"


def fixture(version: str, stem: str, ext: str) -> str:
    """`<stem>-<version>.<ext>` from that version's recordings (22.05's lie at the top)."""
    folder = FIXTURES if version == "22.05" else FIXTURES / version
    return (folder / f"{stem}-{version}.{ext}").read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_the_spare_reservation_as_created_and_as_goodput_left_it(version: str) -> None:
    created = parse_reservation(fixture(version, "scontrol-reservation", "txt"), POOL)
    assert created == ReservationInfo(name=POOL, nodes=("node4",), users=("root",), flags=("FLEX", "SPEC_NODES"))
    updated = parse_reservation(fixture(version, "scontrol-reservation-updated", "txt"), POOL)
    assert (updated.nodes, updated.users) == (("node3", "node4"), ("root", "goodput-alice"))
    with pytest.raises(UnknownReservationError):
        parse_reservation(fixture(version, "scontrol-reservation-unknown", "txt"), "goodput-no-such-pool")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_dependency_and_an_array_task_in_text(version: str) -> None:
    pending = job_from_record(split_record(fixture(version, "scontrol-job-dependency", "txt")))
    assert (pending.job_id, pending.state, pending.dependency) == ("2", JobState.PENDING, "afterok:1(unfulfilled)")
    task = job_from_record(split_record(fixture(version, "scontrol-job-array-task", "txt")))
    assert task.state is JobState.RUNNING and len(task.nodes) == 1 and task.comment == "goodput:opt-in"


@pytest.mark.parametrize("version", JSON_SINCE)
def test_a_dependency_and_an_array_task_in_json(version: str) -> None:
    pending = find_job(load(fixture(version, "scontrol-job-dependency", "json")), "2")
    assert (pending.state, pending.dependency) == (JobState.PENDING, "afterok:1(unfulfilled)")
    # `scontrol --json show job 3_1` lists every task of the array: the one asked for is picked
    document = load(fixture(version, "scontrol-job-array-task", "json"))
    assert len(document["jobs"]) == 2
    task = find_job(document, "3_1")
    text = job_from_record(split_record(fixture(version, "scontrol-job-array-task", "txt")))
    assert task.state is JobState.RUNNING and task.nodes == text.nodes and task.job_id == text.job_id
