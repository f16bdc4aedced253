"""The shapes of the live watchers: what a job or cluster watcher is given and what it carries.

Watchers run as long-lived, heartbeating activities distributed over the worker fleet through
Temporal: whichever worker polls the task queue runs them, and when that worker dies the
activity is retried on a survivor with the last heartbeat's details — the file cursors and the
detector state here — so no line is lost and repeated lines map to the same anomaly ids.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from pydantic import Field

from goodput.detect.hang import DEFAULT_HANG_CONFIG, HangConfig
from goodput.detect.job_scan import REFRESH_EVERY_S
from goodput.detect.live import LiveState
from goodput.detect.logtail import TailCursor
from goodput.detect.scan_memory import ScanMemory
from goodput.detect.scheduler_watch import Snapshot
from goodput.models import Anomaly, Frozen, IncidentKey, LogMark
from goodput.scheduler import JobInfo
from goodput.slurm.optin import DEFAULT_MARKER, is_opted_in


class OptInRule(Frozen):
    """Only jobs that asked for goodput are ever acted on (and therefore watched)."""

    comment_marker: str = DEFAULT_MARKER
    partitions: tuple[str, ...] = ()
    all_jobs: bool = False

    def admits(self, job: JobInfo) -> bool:
        """Whether goodput may watch and act on `job`."""
        return self.all_jobs or is_opted_in(job, self.partitions, self.comment_marker)


class WatchJobInput(Frozen):
    """What a job watcher needs: the job attempt, how often to look, and where its predecessor stopped."""

    cluster: str
    job: JobInfo
    started_at: datetime
    poll_interval_s: float = Field(default=0.25, gt=0)
    job_check_interval_s: float = Field(default=5.0, gt=0)
    hang: HangConfig = DEFAULT_HANG_CONFIG
    # Where the previous attempt's watcher stopped: a requeued job appending to the same file
    # must not have its predecessor's fatal lines read again as its own.
    cursors: tuple[TailCursor, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """The job's stdout and stderr files, once each."""
        return tuple(dict.fromkeys(p for p in (self.job.stdout_path, self.job.stderr_path) if p))


class WatchCheckpoint(Frozen):
    """Heartbeat details of a job watcher: enough to resume exactly where it stood."""

    cursors: tuple[TailCursor, ...] = ()
    live: LiveState | None = None


class WatchJobResult(Frozen):
    """How a job watcher ended: the anomalies it sent, why it stopped and where it stopped reading."""

    job_id: str
    anomalies: int
    reason: str
    cursors: tuple[TailCursor, ...] = ()


class WatchClusterInput(Frozen):
    """What the cluster watcher needs: which jobs to watch, how often to look, and the hang settings."""

    cluster: str
    opt_in: OptInRule = Field(default_factory=OptInRule)
    poll_interval_s: float = Field(default=2.0, gt=0)
    log_poll_interval_s: float = Field(default=0.25, gt=0)
    hang: HangConfig = DEFAULT_HANG_CONFIG
    # A job that ends FAILED with one of these exit codes asked not to be restarted (NVRx's
    # launcher exits 93 after its attribution or no-progress verdict).
    never_restart_exit_codes: tuple[int, ...] = (93,)
    # How often every job's whole record is read again (goodput.detect.job_scan): how late a
    # comment changed while its job runs is seen. Between, a scan reads a line per job.
    refresh_records_s: float = Field(default=REFRESH_EVERY_S, gt=0)


class ClusterCheckpoint(Frozen):
    """Heartbeat details of the cluster watcher: what it kept of its last scan, so a retry does not
    re-report (goodput.detect.scan_memory)."""

    memory: ScanMemory | None = None
    # The whole last scan, as workers before `memory` heartbeated it: read, never written.
    previous: Snapshot | None = None
    scans: int = 0

    def last_scan(self) -> Snapshot | None:
        """The scan the next one is compared with; None before the first."""
        return self.memory.snapshot() if self.memory is not None else self.previous


class AnomalySink(Protocol):
    """Where detectors send what they see: signal-with-start of the incident, in the service."""

    async def submit(self, anomaly: Anomaly) -> None:
        """Deliver one anomaly to its incident (starting the incident when there is none)."""
        ...


class WatchLauncher(Protocol):
    """Starts (idempotently) the log watcher of one job attempt, and hands over between attempts."""

    async def launch(self, request: WatchJobInput) -> None:
        """Start the watcher of `request`'s job attempt, unless it already runs."""
        ...

    async def handover(self, cluster: str, job_id: str, attempt: int, wait_s: float) -> tuple[TailCursor, ...]:
        """Where the previous attempt's watcher stopped reading (empty when there was none)."""
        ...

    async def delivered(self, key: IncidentKey) -> tuple[LogMark, ...]:
        """How far into each file the lines of `key`'s incident go (goodput.detect.log_marks);
        empty when there is no incident yet or it cannot be asked."""
        ...
