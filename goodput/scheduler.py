"""The `Scheduler` seam: everything goodput asks of Slurm, as one Protocol.

Backends (local CLI, SSH, slurmrestd, pyslurm, and the in-memory fake) implement it; activities
call it; nothing else talks to a scheduler. Errors are split into retryable and permanent here so
the activity boundary can map them to Temporal's retry semantics in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import Field

from goodput.models import Frozen


class JobState(StrEnum):
    """Slurm's job states, by the names Slurm prints."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    REQUEUED = "REQUEUED"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    UNKNOWN = "UNKNOWN"


ACTIVE_JOB_STATES = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED,
                               JobState.COMPLETING, JobState.REQUEUED, JobState.RESIZING})


class JobInfo(Frozen):
    """One Slurm job as goodput needs it: state, nodes, outputs, opt-in comment and owner."""

    job_id: str
    name: str = ""
    state: JobState
    state_reason: str = ""
    partition: str = ""
    nodes: tuple[str, ...] = ()
    comment: str = ""
    requeue: bool = False
    restart_count: int = 0
    exit_code: str = ""
    stdout_path: str = ""
    stderr_path: str = ""
    command: str = ""
    work_dir: str = ""
    excluded_nodes: tuple[str, ...] = ()
    held: bool = False
    # Slurm 25.11+ requeued the job itself when it failed and holds it because no epilog failed
    # (`--requeue=expedite` on a site with `enable_expedited_requeue`): held until someone
    # releases it, which goodput does only when its own verdict says restart (docs/slurm.md).
    # Read from fields only slurmctld sets (state flag, job flag, exit code), never from a reason
    # text alone: `scontrol requeuehold` by the job's owner gives the same reason.
    expedite_held: bool = False
    # The reservation the job asked for (`--reservation`): a constraint goodput keeps, so such a
    # job is never moved into the hot-spare pool.
    reservation: str = Field(default="", max_length=1024)
    # What it waits on, as Slurm prints it (`afterok:12(unfulfilled)`); the owner's text.
    dependency: str = Field(default="", max_length=4096)
    # The job's owner as Slurm records it (never as the job describes itself): resubmissions run
    # as this user and checkpoint trees are read with this user's permissions. Empty/None when
    # the backend did not say; goodput then refuses what would need it.
    user: str = ""
    user_id: int | None = Field(default=None, ge=0, le=2**32 - 1)
    group_id: int | None = Field(default=None, ge=0, le=2**32 - 1)


class JobStatus(Frozen):
    """What a poll needs of a job, and nothing its owner can write: a storm's polls of many jobs
    are one batched read of exactly these fields (issue #29)."""

    job_id: str
    state: JobState
    state_reason: str = Field(default="", max_length=300)
    nodes: tuple[str, ...] = ()
    restart_count: int = Field(default=0, ge=0)
    held: bool = False
    # When Slurm lets it start (epoch seconds; None if not said): a requeued job waits out Slurm's
    # requeue delay, which a poller can sleep through instead of polling (issue #29).
    eligible_at: float | None = None
    # Where it runs or waits (an admin's names; a pending job may list several): the cluster
    # watcher's scan reads it for opt-in by partition. Empty where the read did not ask for it.
    partition: str = Field(default="", max_length=1024)


def status_of(job: JobInfo) -> JobStatus:
    """A full record's status fields (backends that read one job at a time)."""
    return JobStatus(job_id=job.job_id, state=job.state, state_reason=job.state_reason[:300], nodes=job.nodes,
                     restart_count=job.restart_count, held=job.held, partition=job.partition[:1024])


def statuses_of(jobs: Sequence[JobInfo], node: str = "", user_id: int | None = None) -> list[JobStatus]:
    """`list_job_statuses` from whole records (backends whose every read loads them anyway)."""
    return [status_of(job) for job in jobs
            if (not node or node in job.nodes) and (user_id is None or job.user_id == user_id)]


def with_status(job: JobInfo, status: JobStatus) -> JobInfo:
    """The record `job` with the state a later status read found (its owner's fields unchanged)."""
    return job.model_copy(update={"state": status.state, "state_reason": status.state_reason, "nodes": status.nodes,
                                  "restart_count": status.restart_count, "held": status.held})


# Slurm's words for a node that is out (DOWN, FAIL, FAILING) and for one that stopped answering
# (the NOT_RESPONDING flag, sinfo's `*`), as prefixes of its state and flags.
NODE_DOWN_WORDS = ("DOWN", "FAIL")
NODE_NO_ANSWER_WORDS = ("NOT_RESPONDING", "NO_RESPOND")


class NodeInfo(Frozen):
    """One Slurm node: its state and flags, and why (and by whom) it is drained or down."""

    name: str
    state: str
    flags: tuple[str, ...] = ()
    reason: str = ""
    reason_user: str = ""
    gres: str = ""

    @property
    def drained(self) -> bool:
        """Draining or drained, whether the flag or the state says so."""
        return "DRAIN" in self.flags or self.state.upper() in {"DRAINED", "DRAINING", "DRAIN"}

    def says(self, prefixes: Sequence[str]) -> bool:
        """Whether its state or one of its flags starts with one of `prefixes`."""
        words = {self.state.upper(), *(f.upper() for f in self.flags)}
        return any(w.startswith(p) for w in words for p in prefixes)

    @property
    def dead(self) -> bool:
        """Slurm calls it DOWN, FAIL or not responding (however briefly)."""
        return self.says((*NODE_DOWN_WORDS, *NODE_NO_ANSWER_WORDS))


class ReservationInfo(Frozen):
    """A Slurm reservation as goodput uses one: the hot-spare pool (goodput.recover.spares)."""

    name: str
    nodes: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()


class ActionResult(Frozen):
    """What a scheduler call did; `changed=False` means it was already so (idempotent no-op)."""

    changed: bool
    detail: str = ""
    new_job_id: str | None = None


class ResubmitRequest(Frozen):
    """A retried resubmit must return the copy the first call made (tagged
    `goodput:resubmit-of=ID:TOKEN`, where only goodput can mint TOKEN; see goodput.slurm.resubmit)."""

    exclude: tuple[str, ...] = ()
    # Only GOODPUT_* variables (GOODPUT_RESUME_FROM, GOODPUT_RESUME_STEP): the copy runs as its owner
    # with a clean environment, never with goodput's (docs/slurm.md, "How resubmission runs").
    environment: Mapping[str, str] = Field(default_factory=dict)
    hold: bool = False
    # The incident on whose behalf goodput resubmits; part of the copy's tag, so a tag minted for
    # one incident is not another's.
    incident_id: str = ""


class SlurmSwitch(Frozen):
    """One switch of Slurm's topology (topology.conf): its name, its level (0: a leaf, nodes hang
    under it directly) and its nodes (a Slurm hostlist)."""

    name: str = Field(min_length=1, max_length=128)
    level: int = Field(default=0, ge=0, le=64)
    nodes: str = Field(default="", max_length=65_536)


class SchedulerError(Exception):
    """Any scheduler failure. Subclasses say whether retrying can help."""


class TransientSchedulerError(SchedulerError):
    """The controller is busy, restarting or unreachable: retry later."""


class PermanentSchedulerError(SchedulerError):
    """Retrying cannot help: the request itself is wrong."""


class UnknownJobError(PermanentSchedulerError):
    """No job with that id (it never existed, or Slurm forgot it)."""


class UnknownNodeError(PermanentSchedulerError):
    """No node with that name."""


class UnknownReservationError(PermanentSchedulerError):
    """No reservation with that name."""


class NotOwnedError(PermanentSchedulerError):
    """goodput refuses to touch a node someone else drained (or drained for another reason)."""


@runtime_checkable
class Scheduler(Protocol):
    """Async so that CLI, SSH and REST backends share one shape."""

    async def get_job(self, job_id: str) -> JobInfo:
        """The job `job_id`, only from output that cannot be another job's; UnknownJobError if there is none."""
        ...

    async def job_status(self, job_id: str) -> JobStatus:
        """The job's state, reason, nodes and restart count; backends may send the reads of one tick
        as one command (the CLI's one scontrol, a lookup per job); UnknownJobError if there is no such job."""
        ...

    async def list_jobs(self) -> Sequence[JobInfo]:
        """Every job the controller knows."""
        ...

    async def list_job_statuses(self, node: str = "", user_id: int | None = None) -> Sequence[JobStatus]:
        """Every job the controller knows (only those on `node`, or of the user `user_id`, when
        given), as id, state, restart count, nodes and partition: the fields no job can write,
        without each job's whole record, so that a scan every few seconds costs a line per job
        (issue #29)."""
        ...

    async def get_node(self, name: str) -> NodeInfo:
        """The node `name`; UnknownNodeError if there is none."""
        ...

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        """Every node of the cluster; only those of `partition` (a comma-separated list) when given,
        so that what an incident reads does not grow with the cluster (issue #29)."""
        ...

    async def list_dead_nodes(self) -> Sequence[NodeInfo]:
        """The nodes Slurm calls DOWN, FAIL or not responding, and no others: what the cluster watcher
        compares, read without listing the whole cluster where the backend can (issue #29)."""
        ...

    async def topology(self) -> Sequence[SlurmSwitch]:
        """The switches of Slurm's topology (`scontrol show topology`); empty when Slurm has none.
        A backend that cannot read it raises PermanentSchedulerError."""
        ...

    async def drain_node(self, name: str, reason: str) -> ActionResult:
        """Drain the node with `reason`, unless it is drained already or someone else's (`rules.drain_noop`)."""
        ...

    async def resume_node(self, name: str, reason: str) -> ActionResult:
        """Resume only a node whose drain reason is exactly `reason` (goodput's own)."""
        ...

    async def requeue_job(self, job_id: str, *, hold: bool = False, known: JobInfo | None = None,
                          fresh: bool = False) -> ActionResult:
        """Requeue an opted-in job (held when `hold`); a job already pending again is a no-op (held if asked).

        `known`: the caller's record of this job a moment ago. Its opt-in is judged from it, and a
        backend may then read only the job's status again before acting (the CLI's is batched with
        the storm's other resumes) instead of the whole record. `fresh`: `known`'s state, restart
        count and hold were read from Slurm just now, in the same step (resume's own status read):
        a backend acts on them without reading them again (one batch window less per requeue in a
        storm, #29). A job that moved in between is no worse off than with a second read a batch
        window before the command: scontrol refuses a job pending again, which is then read whole."""
        ...

    async def resubmit_job(self, job_id: str, request: ResubmitRequest) -> ActionResult:
        """Submit a copy of an opted-in job as its owner, excluding `request.exclude`; a retry finds its copy."""
        ...

    async def hold_job(self, job_id: str) -> ActionResult:
        """Hold an opted-in queued job; one already held is a no-op."""
        ...

    async def release_job(self, job_id: str, *, known: JobInfo | None = None) -> ActionResult:
        """Release an opted-in held job; one not held is a no-op. `known`: the caller's record of
        the job from moments ago (its opt-in and owner), so a backend may read only its state."""
        ...

    async def cancel_job(self, job_id: str) -> ActionResult:
        """Cancel an opted-in job; one finished or finishing is a no-op."""
        ...

    async def exclude_nodes(self, job_id: str, nodes: Sequence[str], *, known: JobInfo | None = None) -> ActionResult:
        """Add nodes to a queued job's excluded nodes (a requeue away from distrusted nodes).
        `known`: the caller's record of the job from moments ago, its excluded nodes included."""
        ...

    async def update_dependency(self, job_id: str, dependency: str) -> ActionResult:
        """Point a queued job's dependency elsewhere (job chains, goodput.slurm.dependencies)."""
        ...

    async def get_reservation(self, name: str) -> ReservationInfo:
        """The reservation `name` (the hot-spare pool); UnknownReservationError if there is none."""
        ...

    async def allow_reservation_user(self, name: str, user: str) -> ActionResult:
        """Add one user to the reservation's users (a recovered job's owner, into the spare pool)."""
        ...

    async def disallow_reservation_user(self, name: str, user: str) -> ActionResult:
        """Remove one user from the reservation's users (the spare pool's grant ends with its recovery)."""
        ...

    async def use_reservation(self, job_id: str, name: str) -> ActionResult:
        """Point a queued (held) job at the reservation, so it may start on its nodes."""
        ...

    async def add_reservation_nodes(self, name: str, nodes: Sequence[str]) -> ActionResult:
        """Add nodes to the reservation (refilling the spare pool with nodes back in service)."""
        ...
