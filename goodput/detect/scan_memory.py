"""What the cluster watcher keeps of one scan for the next: sized by what it watches, not by the cluster.

The watcher compares each scan of Slurm with the one before (goodput.detect.scheduler_watch) and
heartbeats what it kept, so that a retry on another worker does not report again what was
already reported. It used to keep, and heartbeat, the whole scan: every job in the queue and every
node, with all their fields. At 10,000 nodes and 1,250 running jobs that is 1.9 MB of heartbeat
details, and Temporal refuses details over 2 MB (the SDK fails the activity with
`PayloadsTooLarge`, every attempt, right after its first scan): at that size the watcher would
report nothing at all (#29).

`changes` and `new_running` only read, of the earlier scan, each job's state and restart count,
the nodes that were dead (DOWN, FAIL, not responding), since when each has not answered, and
the scan's time. A node that is absent reads as alive, exactly as a live one does. So this keeps
those facts for the jobs the watcher watches and for the jobs that have ended (Slurm forgets
those after MinJobAge), and for the dead nodes only. It grows with the watched jobs and the dead
nodes, never with the pending queue or the healthy cluster. Past `MAX_REMEMBERED` entries it is
not kept at all (`of_scan` returns None): a retry then starts from a fresh baseline, which misses
what ended while no worker watched, rather than a watcher that cannot heartbeat.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from goodput.detect.scheduler_watch import Snapshot
from goodput.models import Frozen
from goodput.scheduler import ACTIVE_JOB_STATES, JobInfo, JobState, NodeInfo

# About 40 bytes of JSON per job and 60 per dead node: 1.6-2.4 MB at this bound would be too
# close to Temporal's 2 MB; 20,000 is 0.8-1.2 MB.
MAX_REMEMBERED = 20_000


class ScanMemory(Frozen):
    """The facts of one scan that the next one compares with, in their compact form."""

    taken_at: datetime | None = None
    jobs: dict[str, tuple[JobState, int]] = {}
    """Job id → (state, restart count): the watched jobs and the ended ones."""
    dead_nodes: dict[str, tuple[str, tuple[str, ...]]] = {}
    """Node name → (state, flags), for the nodes Slurm called dead in that scan."""
    no_answer_since: dict[str, datetime] = {}

    def snapshot(self) -> Snapshot:
        """The scan as `changes` and `new_running` read it."""
        return Snapshot(
            jobs={i: JobInfo(job_id=i, state=state, restart_count=count) for i, (state, count) in self.jobs.items()},
            nodes={n: NodeInfo(name=n, state=state, flags=flags) for n, (state, flags) in self.dead_nodes.items()},
            taken_at=self.taken_at, no_answer_since=dict(self.no_answer_since))


def remembered(job: JobInfo, watched: Collection[str]) -> bool:
    """Whether a later scan may need this job's state: watched, or ended (it may be watched later)."""
    return job.job_id in watched or job.state not in ACTIVE_JOB_STATES


def of_scan(scan: Snapshot, watched: Collection[str]) -> ScanMemory | None:
    """What the next scan needs of `scan`; None when that is more than `MAX_REMEMBERED` entries."""
    jobs = {i: (j.state, j.restart_count) for i, j in scan.jobs.items() if remembered(j, watched)}
    dead = {n.name: (n.state, n.flags) for n in scan.nodes.values() if n.dead}
    if len(jobs) + len(dead) + len(scan.no_answer_since) > MAX_REMEMBERED:
        return None
    return ScanMemory(taken_at=scan.taken_at, jobs=jobs, dead_nodes=dead, no_answer_since=dict(scan.no_answer_since))
