"""One fault, one set of Slurm commands (issue #29): the CLI backend's requeues, releases and
drains of one tick go to Slurm as one command, each caller still gets its own result, one bad job
fails alone, and no byte a job controls can put an id into the list."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from activities.adapters.slurm_batch import Coalescer, Outcome
from activities.adapters.slurm_cli import REQUEUE, SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult
from goodput.identifiers import InvalidIdentifierError
from goodput.scheduler import ActionResult, TransientSchedulerError, UnknownJobError
from goodput.slurm.batch import (
    batchable_job,
    job_list,
    node_line,
    parse_dead_nodes,
    parse_partition_nodes,
    sinfo_dead_nodes,
    sinfo_partition,
)
from tests.unit.slurm_cli_helpers import HELD, RUNNING
from tests.unit.slurm_cli_helpers import node_line as recorded_node

MUTATING = {"requeue", "requeuehold", "release", "update", "hold"}


class SlurmStandIn:
    """Answers `scontrol show job/node` for any id, and the mutating commands as `answer` says;
    records every mutating command."""

    def __init__(self, record: str = RUNNING, answer: dict[str, CommandResult] | None = None) -> None:
        self.record = record
        self.answer = answer or {}
        self.acted: list[tuple[str, ...]] = []
        self.node_reads: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        argv = tuple(argv)
        if argv == ("scontrol", "--version"):
            return CommandResult(argv, 0, "slurm-wlm 22.05.8\n", "")
        if argv[:3] == ("scontrol", "show", "job"):
            first = self.record.split(" ", 1)[0]  # JobId=8
            return CommandResult(argv, 0, self.record.replace(f"{first} ", f"JobId={argv[-1]} ", 1), "")
        if argv[:3] == ("scontrol", "show", "node"):  # one line per node of the list
            self.node_reads.append(argv)
            return CommandResult(argv, 0, "".join(recorded_node("node1").replace("NodeName=node1 ", f"NodeName={n} ", 1)
                                                  + "\n" for n in argv[-1].split(",")), "")
        assert argv[1] in MUTATING, argv
        self.acted.append(argv)
        return self.answer.get(argv[-1], self.answer.get("*", CommandResult(argv, 0, "", "")))


async def test_concurrent_requeues_are_one_scontrol_command_and_each_says_so() -> None:
    slurm = SlurmStandIn()
    backend = SlurmCliBackend(slurm)
    results = await asyncio.gather(*(backend.requeue_job(j) for j in ("21", "22", "23")))
    assert slurm.acted == [("scontrol", "requeue", "21,22,23")]
    assert all(r.changed for r in results)
    assert all("one of 3 in `scontrol requeue 21,22,23`" in r.detail for r in results), results


async def test_held_requeues_and_releases_batch_by_kind() -> None:
    slurm = SlurmStandIn()
    backend = SlurmCliBackend(slurm)
    await asyncio.gather(backend.requeue_job("31", hold=True), backend.requeue_job("32", hold=True),
                         backend.requeue_job("33"))
    assert sorted(slurm.acted) == [("scontrol", "requeue", "33"), ("scontrol", "requeuehold", "31,32")]
    held = SlurmStandIn(HELD)
    releaser = SlurmCliBackend(held, allow_partitions={"debug"})
    released = await asyncio.gather(*(releaser.release_job(j) for j in ("41", "42")))
    assert held.acted == [("scontrol", "release", "41,42")] and all(r.changed for r in released)


async def test_one_invalid_job_of_three_fails_alone_and_the_others_are_requeued_once() -> None:
    # scontrol acts on every job of a list it can and names each one it cannot (seen on 22.05)
    slurm = SlurmStandIn(answer={"51,52,53": CommandResult((), 1, "", "Invalid job id specified for job 53\n")})
    backend = SlurmCliBackend(slurm)
    results = await asyncio.gather(*(backend.requeue_job(j) for j in ("51", "52", "53")), return_exceptions=True)
    assert slurm.acted == [("scontrol", "requeue", "51,52,53")]  # nothing sent twice
    assert [r.changed for r in results[:2] if isinstance(r, ActionResult)] == [True, True]
    assert isinstance(results[2], UnknownJobError)


async def test_a_batch_failing_without_naming_a_job_is_sent_again_one_by_one() -> None:
    unreachable = CommandResult((), 1, "", "slurm_requeue error: Unable to contact slurm controller\n")
    slurm = SlurmStandIn(answer={"61,62": unreachable, "62": unreachable})
    backend = SlurmCliBackend(slurm)
    first, second = await asyncio.gather(backend.requeue_job("61"), backend.requeue_job("62"),
                                         return_exceptions=True)
    assert slurm.acted[0] == ("scontrol", "requeue", "61,62")
    assert sorted(slurm.acted[1:]) == [("scontrol", "requeue", "61"), ("scontrol", "requeue", "62")]
    assert isinstance(first, ActionResult) and first.changed and "one of" not in first.detail
    assert isinstance(second, TransientSchedulerError)


async def test_drains_with_one_reason_are_one_command_and_other_reasons_are_not_merged() -> None:
    slurm = SlurmStandIn()
    backend = SlurmCliBackend(slurm)
    same = "goodput:inc-1: switch leaf7 down"
    other = "goodput:inc-2: xid 79"
    results = await asyncio.gather(backend.drain_node("node1", same), backend.drain_node("node2", same),
                                   backend.drain_node("node3", other))
    assert sorted(slurm.acted) == [
        ("scontrol", "update", "NodeName=node1,node2", "State=DRAIN", f"Reason={same}"),
        ("scontrol", "update", "NodeName=node3", "State=DRAIN", f"Reason={other}")]
    assert "one of 2" in results[0].detail and "one of" not in results[2].detail


async def test_a_batch_is_capped_and_the_rest_goes_in_the_next_one() -> None:
    slurm = SlurmStandIn()
    backend = SlurmCliBackend(slurm)
    ids = [str(100 + i) for i in range(70)]
    await asyncio.gather(*(backend.requeue_job(j) for j in ids))
    assert [len(argv[-1].split(",")) for argv in slurm.acted] == [64, 6]


async def test_a_job_list_is_never_made_of_job_controlled_text() -> None:
    slurm = SlurmStandIn()
    backend = SlurmCliBackend(slurm)
    for hostile in ("71,72", "71 72", "-h", "71\n72"):
        with pytest.raises(InvalidIdentifierError):
            await backend.requeue_job(hostile)
    assert slurm.acted == []
    # an array task's or het component's id is never joined into a list (the backend sends it alone)
    assert not batchable_job("73_1") and not batchable_job("73+1") and batchable_job("74")
    for bad in (["73_1", "74"], ["74", "74"], [], ["٣"]):
        with pytest.raises(InvalidIdentifierError):
            job_list(bad)


async def test_a_cancelled_caller_does_not_cancel_its_batch_mates() -> None:
    slurm = SlurmStandIn()
    backend = SlurmCliBackend(slurm, coalesce_tick_s=0.2)
    doomed = asyncio.create_task(backend.requeue_job("81"))
    kept = asyncio.create_task(backend.requeue_job("82"))
    open_batches = backend._coalescer._open
    while sum(len(b.waiters) for b in open_batches.values()) < 2:
        await asyncio.sleep(0)
    doomed.cancel()
    assert (await kept).changed
    assert slurm.acted == [("scontrol", "requeue", "81,82")]
    with pytest.raises(asyncio.CancelledError):
        await doomed


async def test_a_batch_waits_for_stragglers_while_they_keep_coming() -> None:
    # a storm's incidents reach the requeue spread over their own reads; each arrives well within
    # a tick of the one before, so all go together though together they span two ticks
    slurm = SlurmStandIn()
    coalescer = Coalescer(slurm, tick_s=0.2, max_wait_s=5.0)

    async def later(job_id: str, delay: float) -> Outcome:
        await asyncio.sleep(delay)
        return await coalescer.run(REQUEUE, (), job_id)

    outcomes = await asyncio.gather(*(later(str(90 + i), 0.05 * i) for i in range(8)))
    assert slurm.acted == [("scontrol", "requeue", ",".join(str(90 + i) for i in range(8)))]
    assert {o.share.size for o in outcomes} == {8}


async def test_two_incidents_draining_one_node_in_one_tick_do_not_both_drain_it() -> None:
    # Both read the node undrained before either acts; the tick must not widen that race into
    # two drains where the second reason silently replaces the first incident's
    slurm = SlurmStandIn()
    backend = SlurmCliBackend(slurm)
    first, second = await asyncio.gather(backend.drain_node("node1", "goodput:inc-1: xid 79"),
                                         backend.drain_node("node1", "goodput:inc-2: xid 79"))
    assert len(slurm.acted) == 1 and [first.changed, second.changed].count(True) == 1
    lost = second if first.changed else first
    assert "being drained by goodput" in lost.detail, lost.detail


def test_a_partitions_node_list_is_names_and_states_only() -> None:
    nodes = parse_partition_nodes("node1|idle+drain|\nnode2|mixed|\nnode1|idle+drain|\nnode3|down*|\n")
    assert [(n.name, n.state, n.drained) for n in nodes] == [
        ("node1", "IDLE", True), ("node2", "MIXED", False), ("node3", "DOWN", False)]
    assert sinfo_partition("gpu,debug")[-2:] == ["--partition=gpu,debug", "--Format=NodeList:|,StateComplete:|"]
    for hostile in ("node1|idle|extra|\n", "node1|idle drain|\n", "-x|idle|\n"):
        with pytest.raises(ValueError):
            parse_partition_nodes(hostile)
    with pytest.raises(InvalidIdentifierError):
        sinfo_partition("gpu --all")


async def test_a_ticks_node_reads_are_one_scontrol_show_node_and_each_caller_gets_its_own_node() -> None:
    slurm = SlurmStandIn()
    backend = SlurmCliBackend(slurm)
    nodes = await asyncio.gather(*(backend.get_node(n) for n in ("node1", "node2", "node3", "node2")))
    assert [n.name for n in nodes] == ["node1", "node2", "node3", "node2"]
    assert slurm.node_reads == [("scontrol", "show", "node", "-o", "node1,node2,node3")]


def test_a_batched_node_answer_is_used_only_when_it_is_one_line_per_node_asked() -> None:
    one, two = recorded_node("node1"), recorded_node("node2")
    assert node_line(f"{one}\n{two}\n", "node2", ["node1", "node2"]) == two
    forged = one.replace("Reason=", "Reason=x\nNodeName=node2 State=IDLE Reason=") if "Reason=" in one else \
        f"{one}\nNodeName=node2 State=IDLE"
    for text in (f"{forged}\n{two}\n",  # a second line posing as node2
                 f"{one}\n",  # node2 missing
                 f"{one}\n{two}\n{recorded_node('node3')}\n",  # a node not asked for
                 f"{one}\nState=IDLE\n{two}\n"):  # a line that is no node's
        assert node_line(text, "node1", ["node1", "node2"]) is None, text


async def test_a_doubtful_batched_node_answer_makes_each_node_read_alone() -> None:
    class Forging(SlurmStandIn):
        async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                      timeout_s: float | None = None) -> CommandResult:
            result = await super().run(argv, stdin=stdin, timeout_s=timeout_s)
            if tuple(argv[:3]) == ("scontrol", "show", "node") and "," in argv[-1]:
                return CommandResult(result.argv, 0, result.stdout + "NodeName=node1 State=IDLE\n", "")
            return result

    slurm = Forging()
    backend = SlurmCliBackend(slurm)
    nodes = await asyncio.gather(*(backend.get_node(n) for n in ("node1", "node2")))
    assert [n.name for n in nodes] == ["node1", "node2"]
    assert sorted(slurm.node_reads) == [("scontrol", "show", "node", "-o", n)
                                        for n in ("node1", "node1,node2", "node2")]


async def test_exclusions_join_only_jobs_whose_lists_are_equal_and_a_bad_job_fails_alone() -> None:
    bad = CommandResult(("scontrol",), 1, "", "Invalid job id specified for job 74\n")
    slurm = SlurmStandIn(answer={"ExcNodeList=node9": bad})
    backend = SlurmCliBackend(slurm)
    results = await asyncio.gather(backend.exclude_nodes("71", ["node9"]), backend.exclude_nodes("72", ["node9"]),
                                   backend.exclude_nodes("73", ["node8"]), backend.exclude_nodes("74", ["node9"]),
                                   return_exceptions=True)
    assert sorted(slurm.acted) == [("scontrol", "update", "JobId=71,72,74", "ExcNodeList=node9"),
                                   ("scontrol", "update", "JobId=73", "ExcNodeList=node8")]
    assert isinstance(results[3], UnknownJobError), results
    assert all(isinstance(r, ActionResult) and r.changed for r in results[:3]), results
    assert "one of 3" in str(results[0]) and "one of" not in str(results[2])


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def test_the_dead_nodes_as_sinfo_22_05_prints_them() -> None:
    down = parse_dead_nodes((FIXTURES / "sinfo-dead-nodes-22.05.txt").read_text())
    assert [(n.name, n.state, n.flags, n.reason, n.dead) for n in down] == [
        ("node2", "DOWN", (), "admin: PSU | fan", True),  # a `|` in the reason stays in it
        ("node3", "IDLE", ("FAIL",), "hw check", True),
        ("node4", "MIXED", ("FAIL",), "failing under a job", True)]
    later = parse_dead_nodes((FIXTURES / "sinfo-dead-nodes-down-22.05.txt").read_text())
    assert (later[0].name, later[0].state, later[0].flags, later[0].reason) == (
        "node1", "DOWN", ("NOT_RESPONDING",), "Not responding")
    [silent] = parse_dead_nodes((FIXTURES / "sinfo-dead-nodes-not-responding-22.05.txt").read_text())
    assert (silent.state, silent.flags, silent.reason, silent.dead) == ("IDLE", ("NOT_RESPONDING",), "", True)
    assert parse_dead_nodes("") == []
    assert sinfo_dead_nodes()[3:] == ["--states=down,fail,no_respond", "--Format=NodeList:|,StateComplete:|,Reason:|"]


@pytest.mark.parametrize("hostile", ["node1|idle drain|x|\n", "-x|down|x|\n", "node1|down|no end\n", "node1\n",
                                     "node1|down|" + "r" * 5000])
def test_a_dead_node_line_that_is_not_sinfos_is_refused(hostile: str) -> None:
    with pytest.raises((ValueError, InvalidIdentifierError)):
        parse_dead_nodes(hostile)
