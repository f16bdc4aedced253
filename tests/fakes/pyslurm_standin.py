"""An in-memory stand-in for the slice of pyslurm 25.11 that `PyslurmBackend` uses.

pyslurm links against one Slurm release's libslurm (pyslurm 25.11.x needs Slurm 25.11) and cannot
be built against the Slurm 22.05 this project's lab runs, so the pyslurm backend is tested against
this instead. It is NOT pyslurm and does not import it. It mirrors, from PySlurm/pyslurm (25.11
branch and the 24.x/25.x files it inherits): `pyslurm/core/job/job.pyx` (Job, Jobs),
`pyslurm/core/job/submission.pxd` (JobSubmitDescription attribute names), `pyslurm/core/node.pyx`
(Node, Nodes), `pyslurm/core/error.pyx` (RPCError) and `pyslurm/xcollections.pyx` (collections:
only `.values()` is used). Same class, method and attribute names, argument shapes and value
types: ids are ints, absent strings are None, `Node.state` is `node_state_string_complete`
("IDLE+DRAIN"), `configured_gres`/`gres_per_node` are dicts, errors carry Slurm's strerror text.
`JobSubmitDescription.submit` keeps pyslurm 25.11's submission.pyx rules that matter to a
resubmission: a `script` naming an existing file is read from it, `environment` "ALL" (the default)
exports the caller's whole environment while a dict exports only itself plus the caller's SLURM_*
variables, and `user_id`/`group_id` submit for another user, which only root may do here.

Behind them sits `Slurmctld`, a toy controller keeping Slurm's semantics for these calls: requeue
makes a job PENDING with its restart count +1 (requeue of a pending job: "Job is pending
execution"; of a --no-requeue job: "Requested operation is presently disabled"), hold sets priority
0, a drain needs a reason and records who set it, RESUME clears it, cancelling a finished job is
silently ignored (as `Job.send_signal` ignores ESLURM_ALREADY_DONE). Loaded objects are snapshots,
as in pyslurm. Simplifications: scheduling is synchronous after every RPC (first fit, whole
nodes); a requeue skips the COMPLETING phase; there is no MIXED state, no accounting, no steps.

This module holds `Slurmctld` and its records and builds the module the backend imports; the
pyslurm classes themselves are in `pyslurm_core.py` (RPCError, Job, Jobs, Node, Nodes; tests import
`RPCError` and the errno values from here too) and `pyslurm_submission.py` (JobSubmitDescription).
"""

from __future__ import annotations

import itertools
import os
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from goodput.slurm.hostlist import expand_hostlist
from tests.fakes.pyslurm_core import (
    ESLURM_ACCESS_DENIED,
    ESLURM_ALREADY_DONE,
    ESLURM_DISABLED,
    ESLURM_INVALID_JOB_ID,
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_NODE_STATE,
    ESLURM_JOB_PENDING,
    SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR,
    Job,
    Jobs,
    Node,
    Nodes,
    RPCError,
)
from tests.fakes.pyslurm_submission import JobSubmitDescription

T = TypeVar("T")
PYSLURM_VERSION = "25.11.0"

_FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                       "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})


@dataclass
class JobRecord:
    """slurmctld's job_record for the fields the backend reads; `script` is the batch script."""

    id: int
    script: str
    name: str | None = None
    state: str = "PENDING"
    state_reason: str | None = None
    partition: str | None = "debug"
    num_nodes: int = 1
    nodes: tuple[str, ...] = ()
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    comment: str | None = None
    is_requeueable: bool = False
    requeue_count: int = 0
    priority: int = 1000
    exit_code: int = 0
    exit_code_signal: int = 0
    end_time: int | None = None
    standard_output: str | None = None
    standard_error: str | None = None
    command: str | None = None
    working_directory: str | None = "/tmp"
    is_batch_job: bool = True
    ntasks: int = 1
    ntasks_per_node: int | None = None
    cpus_per_task: int = 1
    account: str | None = None
    qos: str | None = None
    constraints: list[str] = field(default_factory=list)
    reservation: str | None = None
    time_limit: int | None = None
    memory_per_node: int | None = None
    memory_per_cpu: int | None = None
    gres_per_node: dict[str, int] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)  # as the job will see it
    user_id: int = 0
    user_name: str | None = "root"
    group_id: int = 0
    array_id: int | None = None
    array_task_id: int | None = None
    heterogeneous_id: int | None = None
    heterogeneous_offset: int | None = None


@dataclass
class NodeRecord:
    name: str
    gres: dict[str, int] = field(default_factory=lambda: {"gpu": 8})
    partitions: list[str] = field(default_factory=lambda: ["debug"])
    down: bool = False
    drain: bool = False
    fail: bool = False
    reason: str | None = None
    reason_user: str | None = None



def _hosts(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    return expand_hostlist(value if isinstance(value, str) else ",".join(value))


class Slurmctld:
    """The toy controller behind one stand-in module (`.module` is what the backend imports)."""

    def __init__(self, nodes: dict[str, NodeRecord] | None = None, *, user: str = "root", uid: int = 0,
                 users: dict[int, str] | None = None) -> None:
        self.nodes = nodes if nodes is not None else {f"node{i}": NodeRecord(f"node{i}") for i in range(1, 5)}
        self.jobs: dict[int, JobRecord] = {}
        self.user = user  # who calls the API (the worker): drains record it, submissions default to it
        self.uid = uid
        self.users = {uid: user, **(users or {})}  # slurmctld's view of the passwd database
        self.available = True
        self.calls: list[str] = []  # every RPC, in order
        self._ids = itertools.count(100)
        self._lock = threading.Lock()
        bound = {"_ctl": self}
        self.module = types.ModuleType("pyslurm", "goodput's in-memory stand-in for pyslurm 25.11")
        self.module.__dict__.update(
            __version__=PYSLURM_VERSION, RPCError=RPCError, Job=type("Job", (Job,), bound),
            Jobs=type("Jobs", (Jobs,), bound), Node=type("Node", (Node,), bound),
            Nodes=type("Nodes", (Nodes,), bound),
            JobSubmitDescription=type("JobSubmitDescription", (JobSubmitDescription,), bound))

    def rpc(self, name: str, call: Callable[[], T]) -> T:
        with self._lock:
            self.calls.append(name)
            if not self.available:
                raise RPCError(SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR)
            return call()

    # -- state, as slurmctld keeps it --------------------------------------------------------

    def job(self, job_id: int) -> JobRecord:
        record = self.jobs.get(job_id) if isinstance(job_id, int) else None
        if record is None:
            raise RPCError(ESLURM_INVALID_JOB_ID)
        return record

    def node_state(self, node: NodeRecord) -> str:
        busy = any(node.name in j.nodes for j in self.jobs.values() if j.state == "RUNNING")
        base = "DOWN" if node.down else "ALLOCATED" if busy else "IDLE"
        return base + ("+DRAIN" if node.drain else "") + ("+FAIL" if node.fail else "")

    def add_job(self, record: JobRecord) -> JobRecord:
        """Test helper: put a job in any state without an RPC."""
        self.jobs[record.id] = record
        return record

    def submit(self, desc: JobSubmitDescription, environment: dict[str, str]) -> int:
        owner = self.uid if desc.user_id is None else int(desc.user_id)
        if owner != self.uid and self.uid != 0:  # only root (or SlurmUser) submits for others
            raise RPCError(ESLURM_ACCESS_DENIED)
        job_id = next(self._ids)
        nodes = desc.nodes
        partitions = desc.partitions
        constraints = desc.constraints
        time_limit = desc.time_limit
        self.jobs[job_id] = JobRecord(
            id=job_id, script=desc.script, name=desc.name or "sbatch",
            partition=(partitions if isinstance(partitions, str) else ",".join(partitions or ["debug"])) or "debug",
            num_nodes=int(str(nodes).split("-")[0]) if nodes else 1,
            required_nodes=_hosts(desc.required_nodes), excluded_nodes=_hosts(desc.excluded_nodes),
            comment=desc.comment or None, is_requeueable=bool(desc.is_requeueable),
            priority=0 if desc.priority == 0 else 1000, state_reason="JobHeldUser" if desc.priority == 0 else None,
            standard_output=(desc.standard_output or "slurm-%j.out").replace("%j", str(job_id)),
            standard_error=(desc.standard_error or desc.standard_output or "slurm-%j.out").replace("%j", str(job_id)),
            working_directory=desc.working_directory or os.getcwd(),  # pyslurm's default
            command=None, ntasks=int(desc.ntasks or 1), ntasks_per_node=desc.ntasks_per_node,
            cpus_per_task=int(desc.cpus_per_task or 1), account=desc.account, qos=desc.qos,
            constraints=constraints.split(",") if isinstance(constraints, str) else list(constraints or []),
            reservation=desc.reservations if isinstance(desc.reservations, str) else None,
            time_limit=int(time_limit) if time_limit not in (None, "") else None,
            memory_per_node=desc.memory_per_node, memory_per_cpu=desc.memory_per_cpu,
            gres_per_node=dict(desc.gres_per_node or {}), environment=environment,
            user_id=owner, user_name=self.users.get(owner),
            group_id=int(desc.group_id) if desc.group_id is not None else owner)
        self.schedule()
        return job_id

    def requeue(self, job_id: int, hold: bool) -> None:
        job = self.job(job_id)
        if not job.is_batch_job or not job.is_requeueable:
            raise RPCError(ESLURM_DISABLED)
        if job.state == "PENDING":
            raise RPCError(ESLURM_JOB_PENDING)
        job.state, job.nodes, job.requeue_count, job.end_time = "PENDING", (), job.requeue_count + 1, None
        job.state_reason = "job requeued in held state" if hold else "BeginTime"
        job.priority = 0 if hold else job.priority or 1000
        self.schedule()

    def set_priority(self, job_id: int, priority: int, *, user: bool = False) -> None:
        job = self.job(job_id)
        if job.state in _FINISHED:
            raise RPCError(ESLURM_ALREADY_DONE)
        if priority == 0:
            job.priority, job.state_reason = 0, "JobHeldUser" if user else "JobHeldAdmin"
        else:
            job.priority, job.state_reason = 1000, None
            self.schedule()

    def kill(self, job_id: int, signal: int | str) -> None:
        job = self.jobs.get(job_id)
        if job is None or job.state in _FINISHED:
            return  # Job.send_signal ignores ESLURM_ALREADY_DONE (and INVALID_JOB_ID for SIGKILL)
        if signal in (9, "SIGKILL", "KILL"):
            job.state, job.nodes, job.end_time = "CANCELLED", (), 1
            job.state_reason = None
            self.schedule()

    def update_node(self, name: str, state: str | None, reason: str | None, *, user: str | None = None) -> None:
        names = expand_hostlist(name)
        if not names or any(n not in self.nodes for n in names):
            raise RPCError(ESLURM_INVALID_NODE_NAME)
        wanted = (state or "").upper()
        if wanted in ("DRAIN", "DOWN", "FAIL") and not reason:
            raise RPCError(ESLURM_INVALID_NODE_STATE, "You must specify a reason when DOWNING or DRAINING a node")
        for node in (self.nodes[n] for n in names):
            if wanted in ("DRAIN", "DOWN", "FAIL"):
                node.drain = node.drain or wanted == "DRAIN"
                node.down = node.down or wanted == "DOWN"
                node.fail = node.fail or wanted == "FAIL"
                node.reason, node.reason_user = reason, user or self.user
            elif wanted in ("RESUME", "UNDRAIN"):
                node.drain, node.down, node.fail = False, node.down and wanted == "UNDRAIN", False
                node.reason = node.reason_user = None
            elif reason:
                node.reason, node.reason_user = reason, user or self.user
        self.schedule()

    def schedule(self) -> None:
        """First fit, whole nodes, in job id order; drained, down and excluded nodes are skipped."""
        busy = {n for j in self.jobs.values() if j.state == "RUNNING" for n in j.nodes}
        for job in sorted(self.jobs.values(), key=lambda j: j.id):
            if job.state != "PENDING" or job.priority == 0:
                continue
            free = [n for n, r in self.nodes.items()
                    if not (r.drain or r.down or r.fail) and n not in busy and n not in job.excluded_nodes
                    and (not job.required_nodes or n in job.required_nodes)]
            if len(free) >= job.num_nodes:
                job.state, job.nodes, job.state_reason = "RUNNING", tuple(free[:job.num_nodes]), None
                busy.update(job.nodes)
            else:
                job.state_reason = "Resources"
