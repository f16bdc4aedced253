"""Reads a node agent's jobs the way goodput.detect.node_jobs plans it: from the node's own slurmd,
with the controller asked only for the records of jobs whose processes changed.

Where the node cannot answer (`scontrol` missing, slurmd's spool unreadable, an answer that does
not read as Slurm's), the agent asks the controller for its node's jobs instead (`JobScanner`,
node-scoped), as it did before, and says so once. Where more records are due at once than are
worth reading one by one (a node running many jobs, at its first scan or its minute's refresh),
the controller's list of the node answers for them all, and the listing goes on from it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from activities.adapters.job_scan import JobScanner, read_jobs
from activities.adapters.slurm_runner import CommandRunner, LocalRunner
from goodput.detect.job_scan import REFRESH_EVERY_S
from goodput.detect.node_jobs import NodeListingError, Tracked, parse_node_processes, plan
from goodput.identifiers import validate_node_name
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo, Scheduler, SchedulerError

log = logging.getLogger("goodput.agent")
LISTING_TIMEOUT_S = 10.0
MAX_READS = 64
"""Records read one by one in a scan (four at a time); past this, the controller's list of the node."""
# What scontrol says, exiting 1, for a node with no job step (recorded on the 22.05 lab).
NO_STEPS = "No job steps exist on this node."


class NodeJobs:
    """`scan()`: the jobs Slurm runs on `node`, with their records."""

    def __init__(self, scheduler: Scheduler, node: str, *, admits: Callable[[JobInfo], bool] = lambda _: True,
                 runner: CommandRunner | None = None,
                 scontrol: str = "scontrol", refresh_every_s: float = REFRESH_EVERY_S,
                 max_reads: int = MAX_READS, clock: Callable[[], float] = time.monotonic) -> None:
        self.node = validate_node_name(node)
        self._scheduler = scheduler
        self._runner = runner or LocalRunner()
        self._scontrol = scontrol
        self._refresh_every_s = refresh_every_s
        self._max_reads = max_reads
        self._clock = clock
        self._tracked: dict[str, Tracked] = {}
        self._controller = JobScanner(scheduler, admits, node=self.node)
        self.from_controller = 0  # scans the controller answered, for tests
        self._falling_back = False

    async def scan(self, *, from_controller: bool = False) -> Sequence[JobInfo]:
        """This node's jobs now; SchedulerError as the scheduler raised it (what was kept stays).
        `from_controller`: the controller's list of the node, whatever the node says (an Xid is
        weighed against it: a job allocated the node has no process here before its first step)."""
        if from_controller:
            return await self._ask_controller()
        processes = await self._listing()
        if processes is None:
            self._say_falling_back(True, "its slurmd did not list its processes")
            self._tracked = {}  # a later listing starts again from the records it then reads
            return await self._ask_controller()
        self._say_falling_back(False, "")
        now = self._clock()
        todo = plan(processes, self._tracked, now=now, refresh_every_s=self._refresh_every_s,
                    max_reads=self._max_reads)
        if todo is None:  # more records due than single reads are worth: the node's list, once
            jobs = await self._ask_controller()
            self._tracked = {job.job_id: Tracked(job=job, pids=processes[job.job_id], read_at=now)
                             for job in jobs if job.job_id in processes}
            return jobs
        records = await read_jobs(self._scheduler, todo.reads)
        for job_id in todo.reads:
            job = records.get(job_id)
            if job is None or job.state not in ACTIVE_JOB_STATES or self.node not in job.nodes:
                self._tracked.pop(job_id, None)  # ended, forgotten, or moved off this node
            else:
                self._tracked[job_id] = Tracked(job=job, pids=processes.get(job_id, frozenset()), read_at=now)
        for job_id, pids in processes.items():  # the same processes as last seen: only note them
            known = self._tracked.get(job_id)
            if known is not None and job_id not in records:
                self._tracked[job_id] = known.model_copy(update={"pids": pids})
        return [t.job for t in self._tracked.values()]

    async def _ask_controller(self) -> Sequence[JobInfo]:
        self.from_controller += 1
        return [job for job in (await self._controller.scan()).jobs if self.node in job.nodes]

    async def _listing(self) -> dict[str, frozenset[int]] | None:
        try:
            return await list_node_processes(self._runner, self.node, scontrol=self._scontrol)
        except (NodeListingError, SchedulerError, OSError) as err:
            if not self._falling_back:
                log.warning("`%s listpids * %s` failed: %s", self._scontrol, self.node, err)
            return None

    def _say_falling_back(self, falling_back: bool, why: str) -> None:
        if falling_back and not self._falling_back:
            log.warning("node %s: %s; asking the controller for the node's jobs (the whole cluster's list at "
                        "slurmctld) until it does", self.node, why)
        elif self._falling_back and not falling_back:
            log.info("node %s: its slurmd lists its processes again; the controller is asked only for records",
                     self.node)
        self._falling_back = falling_back


async def list_node_processes(runner: CommandRunner, node: str, *, scontrol: str = "scontrol",
                              timeout_s: float = LISTING_TIMEOUT_S) -> dict[str, frozenset[int]]:
    """Each job's pids on `node`, from its slurmd (`scontrol listpids '*' NODE`); NodeListingError
    (or the runner's SchedulerError, OSError) where the node does not answer as Slurm does."""
    result = await runner.run([scontrol, "listpids", "*", validate_node_name(node)], timeout_s=timeout_s)
    if result.returncode == 1 and result.stderr.strip() == NO_STEPS:
        listed = parse_node_processes(result.stdout)  # the header alone: no job here
        if listed:
            raise NodeListingError("processes listed beside 'no job steps'")
        return listed
    if result.returncode != 0:
        raise NodeListingError(f"exit {result.returncode}: {' '.join(result.stderr.split())[:200]}")
    return parse_node_processes(result.stdout)

