"""The cluster watcher's scan as Slurm 22.05 prints it: a line per job of fields no job writes, read
exactly or not at all (then the jobs' records are read the JSON way, as before #29)."""

from __future__ import annotations

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import MAX_OUTPUT
from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import JobState
from goodput.slurm.batch import parse_scan, squeue_scan
from tests.unit.slurm_cli_helpers import FIXTURES, ScriptedRunner, listing, ok

SCAN = (FIXTURES / "squeue-scan-22.05.txt").read_text()


def test_the_scan_as_22_05_prints_it() -> None:
    jobs = {s.job_id: s for s in parse_scan(SCAN)}
    assert len(jobs) == 12 and len(SCAN.splitlines()) == 12
    assert (jobs["4"].state, jobs["4"].nodes, jobs["4"].partition) == (JobState.FAILED, ("node4",), "debug")
    assert jobs["9"].nodes == ("node1", "node4") and jobs["8"].nodes == ("node2", "node3")
    assert (jobs["10"].state, jobs["10"].nodes, jobs["10"].partition) == (JobState.PENDING, (), "debug,gpu")
    # job 10's name and comment each carry a forged line; the scan prints neither
    assert "99" not in jobs and "98" not in jobs
    assert {jobs[i].state for i in ("11", "12")} == {JobState.PENDING}  # a het job's two components


def test_the_scan_asks_for_every_state_and_only_slurms_own_fields() -> None:
    assert squeue_scan() == ["squeue", "--noheader", "--states=all",
                             "--Format=JobID:|,State:|,RestartCnt:|,NodeList:|,Partition:|"]
    assert squeue_scan("node3")[3] == "--nodelist=node3"
    assert squeue_scan(user_id=1001)[3] == "--user=1001"  # a chain's owner: a number, never a name
    with pytest.raises(InvalidIdentifierError):
        squeue_scan("node1,node2 --uid=0")
    for bad in (-1, 2**32, True):
        with pytest.raises(InvalidIdentifierError):
            squeue_scan(user_id=bad)


@pytest.mark.parametrize("hostile", [
    "12|RUNNING|0|node1|debug|\n12|FAILED|0|node1|debug|\n",  # one job twice
    "12|RUNNING|0|node1|debug\n",  # not ended by a `|`: cut short
    "12|RUNNING|0|node1|debug|x|\n",
    "12_3|RUNNING|0|node1|debug|\n",
    "12|RUNNING|0|node[1-|debug|\n",
    "12|RUNNING|0|node1|de bug|\n",
    "12|running|0|node1|debug|\n",
])
def test_a_line_that_is_not_squeues_refuses_the_whole_answer(hostile: str) -> None:
    with pytest.raises(ValueError):
        parse_scan(hostile)


async def test_an_unreadable_scan_is_read_from_the_records_instead() -> None:
    runner = ScriptedRunner({("squeue", "--noheader"): ok("12|RUNNING|0|node1|debug|x|\n"),
                             ("squeue", "--json"): ok(listing())})
    statuses = await SlurmCliBackend(runner=runner).list_job_statuses()
    assert statuses and runner.ran("squeue", "--json")
    runner = ScriptedRunner({("squeue", "--noheader"): ok(SCAN)})
    assert len(await SlurmCliBackend(runner=runner).list_job_statuses()) == 12
    assert not runner.ran("squeue", "--json")


async def test_a_scan_as_long_as_the_runner_keeps_is_not_believed_complete() -> None:
    line = "12|RUNNING|0|node1|debug|\n"
    cut = "".join(f"{i}|RUNNING|0|node1|debug|\n" for i in range(MAX_OUTPUT // len(line) + 1))[:MAX_OUTPUT]
    runner = ScriptedRunner({("squeue", "--noheader"): ok(cut), ("squeue", "--json"): ok(listing())})
    await SlurmCliBackend(runner=runner).list_job_statuses()
    assert runner.ran("squeue", "--json")
