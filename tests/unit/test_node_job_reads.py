"""A node's jobs asked by several callers in one tick are one list (#29).

`squeue --nodelist=N` loads every job from slurmctld and filters on the client, so when a switch's
NVSentinel events ask for the jobs of twenty nodes within a second, twenty such reads cost
slurmctld twenty lists of every job. The CLI backend sends the node lookups of one tick as one
`squeue` of every job's lines, parsed once, and each caller keeps its own node's jobs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult
from goodput.scheduler import TransientSchedulerError

LINES = {"11": "11|RUNNING|0|node[1-2]|gpu|", "12": "12|RUNNING|1|node3|gpu|", "13": "13|PENDING|0||gpu|",
         "14": "14|COMPLETED|0|node2|debug|"}


class Squeue:
    """Answers squeue's job lines (all, or a node's), or fails as an unreachable controller."""

    def __init__(self, *, down: bool = False) -> None:
        self.down = down
        self.ran: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        argv = tuple(argv)
        self.ran.append(argv)
        assert argv[0] == "squeue", argv
        if self.down:
            return CommandResult(argv, 1, "", "slurm_load_jobs error: Unable to contact slurm controller\n")
        node = next((a.split("=", 1)[1] for a in argv if a.startswith("--nodelist=")), "")
        lines = [line for line in LINES.values() if not node or node in line.split("|")[3].replace("[1-2]", "1,node2")]
        return CommandResult(argv, 0, "".join(f"{line}\n" for line in lines), "")


async def test_one_ticks_node_lookups_are_one_list_and_each_keeps_its_nodes_jobs() -> None:
    squeue = Squeue()
    backend = SlurmCliBackend(squeue)
    one, two, three, four = await asyncio.gather(*(backend.list_job_statuses(n)
                                                   for n in ("node1", "node2", "node3", "node4")))
    assert len(squeue.ran) == 1 and not any(a.startswith("--nodelist") for a in squeue.ran[0]), squeue.ran
    assert [s.job_id for s in one] == ["11"]
    assert [s.job_id for s in two] == ["11", "14"]  # an ended job's line names its nodes too, as squeue's filter does
    assert [s.job_id for s in three] == ["12"] and four == []


async def test_a_lookup_alone_asks_for_its_node_only() -> None:
    squeue = Squeue()
    statuses = await SlurmCliBackend(squeue).list_job_statuses("node3")
    assert [s.job_id for s in statuses] == ["12"]
    assert [a for a in squeue.ran[0] if a.startswith("--nodelist")] == ["--nodelist=node3"]


async def test_a_failed_shared_read_is_each_callers_error() -> None:
    backend = SlurmCliBackend(Squeue(down=True))
    results = await asyncio.gather(*(backend.list_job_statuses(n) for n in ("node1", "node2")),
                                   return_exceptions=True)
    assert all(isinstance(r, TransientSchedulerError) for r in results), results


async def test_a_hostile_node_name_is_refused_before_any_read() -> None:
    squeue = Squeue()
    with pytest.raises(ValueError):
        await SlurmCliBackend(squeue).list_job_statuses("node1,node2")
    assert squeue.ran == []
