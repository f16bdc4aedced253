"""A node agent's jobs from its own slurmd: the controller is asked for a job's record only when
the job's processes on the node appear, are all replaced or go, and once a refresh period; never
for the whole cluster's list, unless the node cannot answer or an Xid asks for the controller's word
(#29). Listings are the 22.05 lab's (tests/fixtures/slurm/listpids-*.txt)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from activities.adapters.node_jobs import NO_STEPS, NodeJobs
from activities.adapters.slurm_runner import CommandResult
from goodput.demo.cluster import FakeClusterState
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.node_jobs import NodeListingError, Tracked, parse_node_processes, plan
from goodput.scheduler import JobInfo, JobState, JobStatus, statuses_of
from tests.unit.slurm_cli_helpers import FIXTURES

NODE_1 = (FIXTURES / "listpids-node-22.05.txt").read_text()
ARRAY = (FIXTURES / "listpids-node-array-22.05.txt").read_text()
EMPTY = (FIXTURES / "listpids-node-empty-22.05.txt").read_text()
HEADER = "PID      JOBID    STEPID   LOCALID GLOBALID\n"


def test_the_labs_listings_read_as_each_jobs_processes() -> None:
    assert parse_node_processes(NODE_1) == {"1": frozenset({25051, 25025, 25030, 25027}),
                                            "2": frozenset({25024, 25026})}
    # array tasks under slurmstepd's own numbers, as `scontrol show job` reads them
    assert set(parse_node_processes(ARRAY)) == {"3", "4"}
    assert parse_node_processes(EMPTY) == {} and parse_node_processes("") == {}
    # a task not started yet, as 24.11 lists it (seen in the matrix): the job is on the node, no pid yet
    assert parse_node_processes(HEADER + "-1       76       batch    0       0        \n") == {"76": frozenset()}


@pytest.mark.parametrize("text", [
    "25051    1        0        0       0\n",  # no header
    HEADER + "25051    1;rm     0        0       0\n",
    HEADER + "25051    1        0        0       0       extra\n",
    HEADER + "abc      1        0        0       0\n",
    HEADER + "1        7        0        0       0\n",  # pid 1 is init, never a step's
    HEADER + "25051    1        0        0       0\n" * 70_000,
], ids=["no-header", "id", "columns", "pid", "init", "too-long"])
def test_anything_else_is_refused_whole(text: str) -> None:
    with pytest.raises(NodeListingError):
        parse_node_processes(text)


def tracked(job_id: str, pids: Sequence[int], read_at: float = 0.0) -> Tracked:
    return Tracked(job=JobInfo(job_id=job_id, state=JobState.RUNNING, nodes=("n1",)), pids=frozenset(pids),
                   read_at=read_at)


def test_a_record_is_read_when_the_nodes_processes_of_a_job_change_and_once_a_period() -> None:
    known = {"1": tracked("1", [10, 11]), "2": tracked("2", [20]), "3": tracked("3", [30]),
             "4": tracked("4", []), "5": tracked("5", [50], read_at=-60)}
    now = {"1": frozenset({11, 12}),  # a step ended, another began: the same run
           "2": frozenset({21}),  # every process replaced: the job restarted
           "6": frozenset({60}),  # new here
           "4": frozenset({40}),  # back after a gap
           "5": frozenset({50})}  # unchanged, but its record is a period old
    todo = plan(now, known, now=0.0, refresh_every_s=60, max_reads=16)
    assert todo is not None and set(todo.reads) == {"2", "6", "4", "5", "3"}  # 3: gone from the node
    assert plan(now, known, now=0.0, refresh_every_s=60, max_reads=4) is None


class Listing:
    """`scontrol listpids` as the node answers it, scripted; every call recorded."""

    def __init__(self, *answers: CommandResult) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.calls.append(tuple(argv))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def listed(text: str, code: int = 0, stderr: str = "") -> CommandResult:
    return CommandResult(argv=("scontrol",), returncode=code, stdout=text, stderr=stderr)


class Controller(FakeScheduler):
    """The fake's jobs, counting what the controller is asked: single records, and node lists."""

    def __init__(self) -> None:
        super().__init__(FakeClusterState())
        self.records: list[str] = []
        self.lists = 0

    async def get_job(self, job_id: str) -> JobInfo:
        self.records.append(job_id)
        return self.snapshot().jobs[job_id]

    async def list_job_statuses(self, node: str = "", user_id: int | None = None) -> Sequence[JobStatus]:
        self.lists += 1
        return statuses_of(list(self.snapshot().jobs.values()), node, user_id)


def running(job_id: str, nodes: tuple[str, ...] = ("node1",)) -> JobInfo:
    return JobInfo(job_id=job_id, state=JobState.RUNNING, nodes=nodes, comment="goodput:opt-in")


async def test_in_steady_state_the_controller_is_asked_nothing() -> None:
    controller = Controller()
    controller.add_job(running("1", ("node1", "node2")))
    controller.add_job(running("2"))
    jobs = NodeJobs(controller, "node1", runner=Listing(listed(NODE_1)), clock=lambda: 0.0)
    assert {j.job_id for j in await jobs.scan()} == {"1", "2"} and sorted(controller.records) == ["1", "2"]
    for _ in range(5):
        assert {j.job_id for j in await jobs.scan()} == {"1", "2"}
    assert sorted(controller.records) == ["1", "2"] and controller.lists == 0  # no node list, ever


async def test_a_job_whose_processes_go_is_kept_between_steps_and_dropped_once_it_ended() -> None:
    controller = Controller()
    controller.add_job(running("1", ("node1", "node2")))
    controller.add_job(running("2"))
    only_1 = HEADER + "".join(line + "\n" for line in NODE_1.splitlines() if line.split()[1] == "1")
    listing = Listing(listed(NODE_1), listed(only_1), listed(only_1), listed(only_1))
    jobs = NodeJobs(controller, "node1", runner=listing, clock=lambda: 0.0)
    await jobs.scan()
    assert {j.job_id for j in await jobs.scan()} == {"1", "2"}  # between two steps: still RUNNING here
    controller.set_job_state("2", JobState.COMPLETED)
    assert {j.job_id for j in await jobs.scan()} == {"1"}
    before = len(controller.records)
    await jobs.scan()
    assert len(controller.records) == before  # an ended job is not read again


async def test_an_empty_node_is_no_failure(caplog: pytest.LogCaptureFixture) -> None:
    controller = Controller()
    jobs = NodeJobs(controller, "node3", runner=Listing(listed(EMPTY, 1, NO_STEPS + "\n")))
    with caplog.at_level(logging.WARNING, "goodput.agent"):
        assert await jobs.scan() == []
    assert controller.lists == 0 and caplog.records == []


@pytest.mark.parametrize("answer", [
    listed(HEADER, 1, "scontrol: error: Domain socket directory /var/spool/slurmd/nodeX: No such file or "
                      "directory\n" + NO_STEPS),  # a node name slurmd does not know
    listed(NODE_1, 1, NO_STEPS),  # rows and "no steps" at once
    listed("Permission denied\n"),
], ids=["unknown-node", "contradiction", "garbage"])
async def test_a_node_that_cannot_answer_is_asked_of_the_controller_and_said_once(
        answer: CommandResult, caplog: pytest.LogCaptureFixture) -> None:
    controller = Controller()
    controller.add_job(running("2"))
    jobs = NodeJobs(controller, "node1", runner=Listing(answer))
    with caplog.at_level(logging.WARNING, "goodput.agent"):
        for _ in range(3):
            assert [j.job_id for j in await jobs.scan()] == ["2"]
    assert controller.lists == 3 and jobs.from_controller == 3
    assert len([r for r in caplog.records if "asking the controller" in r.getMessage()]) == 1


async def test_an_xid_asks_the_controller_which_knows_jobs_with_no_process_here_yet() -> None:
    controller = Controller()
    controller.add_job(running("7", ("node2", "node3")))  # allocated node3, its step not started there
    jobs = NodeJobs(controller, "node3", runner=Listing(listed(EMPTY, 1, NO_STEPS)))
    assert await jobs.scan() == []
    assert [j.job_id for j in await jobs.scan(from_controller=True)] == ["7"] and controller.lists == 1


async def test_a_node_with_more_jobs_than_single_reads_takes_the_controllers_list_once() -> None:
    controller = Controller()
    controller.add_job(running("1", ("node1", "node2")))
    controller.add_job(running("2"))
    jobs = NodeJobs(controller, "node1", runner=Listing(listed(NODE_1)), max_reads=1, clock=lambda: 0.0)
    assert {j.job_id for j in await jobs.scan()} == {"1", "2"}
    asked = (controller.lists, len(controller.records))
    for _ in range(3):
        assert {j.job_id for j in await jobs.scan()} == {"1", "2"}
    assert asked[0] == 1 and (controller.lists, len(controller.records)) == asked  # then the node's listing only
