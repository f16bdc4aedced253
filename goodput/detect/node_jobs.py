"""Which jobs a node agent weighs its GPU findings against, from the node's own slurmd.

An agent needs the jobs running on its node. Asking the controller for them costs the controller
the whole cluster's job list every time, whatever the filter: `squeue --nodelist` loads every job
(`slurm_load_jobs`) and filters on the client (Slurm's src/squeue/squeue.c; only a single `--jobs`
or `--user` is filtered by slurmctld). From every agent every 10 s, at 10,000 nodes that is 1,000
whole-cluster job lists a second, and their cost grows with nodes times jobs (#29).

The node itself knows which jobs have processes on it: `scontrol listpids '*' NODE` asks the
node's own slurmstepd daemons through their sockets in slurmd's spool directory and never the
controller. Its rows are Slurm's numbers only (pid, job id, step, task ids), nothing a job writes.
So the agent reads a job's record from the controller, one job at a time, only when the node says
something changed: the job's processes appeared, were all replaced (the job restarted: a new
attempt), or are gone (the job ended, or is between two steps: only its record says which); a job
with no process here is read every scan until its record says it left. And every job's record
once a refresh period, for what only the record says (its comment). `plan` decides those reads,
pure; `activities.adapters.node_jobs` runs them, and falls back to the controller's list where
the node cannot answer.
"""

from __future__ import annotations

from collections.abc import Mapping

import re2

from goodput.models import Frozen
from goodput.scheduler import JobInfo

MAX_ROWS = 65_536
"""More processes than any node runs: a longer listing is refused whole."""
MAX_PID = 4_194_304  # the kernel's PID_MAX_LIMIT
_HEADER = re2.compile(r"^\s*PID\s+JOBID\s+STEPID\s+LOCALID\s+GLOBALID\s*$")
# pid, job id (a plain number: slurmstepd's own, array tasks and het components included), step
# (a number, `batch`, `extern`, `interactive`, a het step's `0+1`), then the task ids or `-`.
# A pid of -1 is a task slurmstepd has not started yet (Slurm 24.11 lists it so): the job is here.
_ROW = re2.compile(r"^\s*(-1|\d{1,7})\s+(\d{1,12})\s+[\w+.-]{1,32}\s+(?:\d{1,9}|-)\s+(?:\d{1,9}|-)\s*$")


class NodeListingError(ValueError):
    """An answer of `scontrol listpids` that does not read exactly as Slurm's: refused whole."""


def parse_node_processes(text: str) -> dict[str, frozenset[int]]:
    """Each job's pids on this node, from `scontrol listpids '*' NODE` (NodeListingError otherwise).
    No job on the node prints the header alone (or nothing, from an older slurmd)."""
    processes: dict[str, set[int]] = {}
    header = False
    for count, line in enumerate(text.splitlines()):
        if count > MAX_ROWS:
            raise NodeListingError(f"more than {MAX_ROWS} rows")
        if not line.strip():
            continue
        if not header:
            if _HEADER.match(line[:256]) is None:
                raise NodeListingError(f"not scontrol listpids' header: {line[:80]!r}")
            header = True
            continue
        row = _ROW.match(line[:256])
        if row is None:
            raise NodeListingError(f"not a process row: {line[:80]!r}")
        pids = processes.setdefault(row.group(2), set())
        pid = int(row.group(1))
        if pid == -1:
            continue
        if not 1 < pid <= MAX_PID:
            raise NodeListingError(f"not a process id: {pid}")
        pids.add(pid)
    return {job_id: frozenset(pids) for job_id, pids in processes.items()}


class Tracked(Frozen):
    """A job this node had processes of: its latest record, and the processes last seen."""

    job: JobInfo
    pids: frozenset[int] = frozenset()
    read_at: float


class NodeJobsPlan(Frozen):
    reads: tuple[str, ...] = ()
    """Ids (slurmstepd's) whose records to read now, in the order to read them."""


def plan(processes: Mapping[str, frozenset[int]], tracked: Mapping[str, Tracked], *, now: float,
         refresh_every_s: float, max_reads: int) -> NodeJobsPlan | None:
    """The records to read after one listing; None when more are due than `max_reads` (the caller
    then asks the controller for the node's jobs at once)."""
    reads: list[str] = []
    for job_id, pids in processes.items():
        known = tracked.get(job_id)
        if known is None or not known.pids or not pids & known.pids or now - known.read_at >= refresh_every_s:
            reads.append(job_id)  # new here, back after a gap, restarted, or due
    # no process here any more: ended, or between two steps; only the record says which
    reads += [job_id for job_id in tracked if job_id not in processes]
    return NodeJobsPlan(reads=tuple(reads)) if len(reads) <= max_reads else None
