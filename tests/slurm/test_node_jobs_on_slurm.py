"""A node agent's jobs, from its node's slurmd (`scontrol listpids '*' NODE`), on real Slurm.

On each lab (22.05, and 24.11 / 26.05 where this run selects them, as `make test-slurm-matrix`
does), a job runs a step on two nodes and another on one: each node's listing names the jobs the
controller places there, a node with no job lists none without failing, and once a job's record is
read the agent asks the controller nothing more while the job's processes stay the same: no job
list of the node, whose cost at slurmctld is the whole cluster's (#29).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
import pytest_asyncio

from activities.adapters.job_scan import JobScanner
from activities.adapters.node_jobs import NodeJobs
from goodput.scheduler import JobInfo, JobState

from .harness import SlurmCliHarness, eventually

pytestmark = pytest.mark.slurm


@pytest_asyncio.fixture(params=["slurm-cli", "slurm-cli-24.11", "slurm-cli-26.05"])
async def cli(request: pytest.FixtureRequest) -> AsyncIterator[SlurmCliHarness]:
    if request.param == "slurm-cli":
        yield SlurmCliHarness(request.getfixturevalue("lab"))
        return
    lab = request.getfixturevalue("version_labs").get(request.param.removeprefix("slurm-cli-"))
    try:
        yield SlurmCliHarness(lab)
    finally:
        lab.reset()


def ids(jobs: Sequence[JobInfo]) -> set[str]:
    return {job.job_id for job in jobs}


async def _listings(readers: Sequence[NodeJobs]) -> list[Sequence[JobInfo]]:
    return [await reader.scan() for reader in readers]


async def test_each_nodes_slurmd_names_the_controllers_jobs_and_the_controller_is_asked_once(
        cli: SlurmCliHarness) -> None:
    lab = cli.lab
    # the last test's jobs were cancelled, but a process may take Slurm's KillWait (30 s) to go
    quiet = [NodeJobs(cli.backend, node, runner=cli.runner) for node in ("node1", "node2", "node3")]
    await eventually(lambda: _listings(quiet), lambda listed: not any(listed), timeout=90,
                     what="no job process left on node1-node3")
    two = lab.sbatch("--nodes=2", "--nodelist=node1,node2", "--comment=goodput:opt-in", "--output=/dev/null",
                     "--wrap", "srun sleep 300")
    one = lab.sbatch("--nodes=1", "--nodelist=node2", "--comment=goodput:opt-in", "--output=/dev/null",
                     "--wrap", "sleep 300")
    try:
        await seen_by_each_node(cli, two, one)
    finally:
        lab.run("scancel", two, one, check=False)


async def seen_by_each_node(cli: SlurmCliHarness, two: str, one: str) -> None:
    backend = cli.backend
    for job_id in (two, one):
        await eventually(lambda job_id=job_id: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                         timeout=60, what=f"job {job_id} running")
    expected = {"node1": {two}, "node2": {two, one}, "node3": set()}
    for node, wanted in expected.items():
        reader = NodeJobs(backend, node, runner=cli.runner)
        # a step reaches its nodes a moment after the job runs
        found = await eventually(reader.scan, lambda jobs, wanted=wanted: ids(jobs) == wanted, timeout=30,
                                 what=f"{node}'s slurmd listing {sorted(wanted)}")
        controller = ids((await JobScanner(backend, lambda _: True, node=node).scan()).jobs)
        assert wanted <= controller and all(node in job.nodes for job in found)
        asked = len(cli.runner.argvs)
        for _ in range(3):
            assert ids(await reader.scan()) == wanted
        since = cli.runner.argvs[asked:]
        assert since and all(argv[1:3] == ("listpids", "*") for argv in since), since  # nothing of slurmctld
        assert reader.from_controller == 0
