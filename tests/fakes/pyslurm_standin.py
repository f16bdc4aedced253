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
"""

from __future__ import annotations

import itertools
import os
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from goodput.slurm.hostlist import compress_hostlist, expand_hostlist
from tests.fakes.pyslurm_submission import JobSubmitDescription

T = TypeVar("T")
PYSLURM_VERSION = "25.11.0"

SLURM_ERROR = -1  # slurm_errno.h values; the backend classifies by text, as scontrol users do
SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR = 1800
ESLURM_ACCESS_DENIED = 2002
ESLURM_INVALID_JOB_ID = 2017
ESLURM_INVALID_NODE_NAME = 2018
ESLURM_ALREADY_DONE = 2021
ESLURM_JOB_PENDING = 2024
ESLURM_DISABLED = 2030
ESLURM_INVALID_NODE_STATE = 2037
STRERROR = {
    SLURM_ERROR: "Unspecified error",
    ESLURM_ACCESS_DENIED: "Access/permission denied",
    SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR: "Unable to contact slurm controller (connect failure)",
    ESLURM_INVALID_JOB_ID: "Invalid job id specified",
    ESLURM_INVALID_NODE_NAME: "Invalid node name specified",
    ESLURM_ALREADY_DONE: "Job/step already completing or completed",
    ESLURM_JOB_PENDING: "Job is pending execution",
    ESLURM_DISABLED: "Requested operation is presently disabled",
    ESLURM_INVALID_NODE_STATE: "Invalid node state specified",
}
_FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                       "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
_NODE_STATES = frozenset({"CANCEL_REBOOT", "DOWN", "DRAIN", "FAIL", "FUTURE", "NORESP", "NO_RESP",
                          "POWER_DOWN", "POWER_DOWN_ASAP", "POWER_DOWN_FORCE", "POWER_UP", "RESUME",
                          "UNDRAIN"})
INFINITE = 0xFFFFFFFF


class RPCError(Exception):
    """pyslurm.RPCError: `errno` and `msg` (Slurm's strerror unless a message was given)."""

    def __init__(self, errno: int = SLURM_ERROR, msg: str | None = None) -> None:
        self.errno = errno
        self.msg = msg or STRERROR.get(errno, "Unspecified error")
        super().__init__(self.msg)


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
    reason: str | None = None
    reason_user: str | None = None


class Job:
    """pyslurm.Job: `Job(job_id)` for actions, `Job.load(job_id)` for a snapshot."""

    _ctl: ClassVar[Slurmctld]

    def __init__(self, job_id: int) -> None:
        self.id = job_id

    @classmethod
    def load(cls, job_id: int) -> Job:
        return cls._ctl.rpc("load_job", lambda: cls._snapshot(cls._ctl.job(job_id)))

    @classmethod
    def _snapshot(cls, record: JobRecord) -> Job:
        job = cls(record.id)
        for name in ("name", "state", "state_reason", "partition", "num_nodes", "comment", "is_requeueable",
                     "requeue_count", "priority", "exit_code", "exit_code_signal", "end_time",
                     "standard_output", "standard_error", "command", "working_directory", "is_batch_job",
                     "ntasks", "ntasks_per_node", "cpus_per_task", "account", "qos", "reservation", "time_limit",
                     "memory_per_node", "memory_per_cpu", "array_id", "array_task_id", "heterogeneous_id",
                     "heterogeneous_offset", "user_id", "user_name", "group_id"):
            setattr(job, name, getattr(record, name))
        for name, value in (("constraints", list(record.constraints)),
                            ("gres_per_node", dict(record.gres_per_node)),
                            ("allocated_nodes", compress_hostlist(record.nodes) or None),
                            ("required_nodes", compress_hostlist(record.required_nodes) or None),
                            ("excluded_nodes", compress_hostlist(record.excluded_nodes) or None),
                            ("cluster", "linux")):
            setattr(job, name, value)
        return job

    def requeue(self, hold: bool = False) -> None:
        self._ctl.rpc("requeue", lambda: self._ctl.requeue(self.id, hold))

    def hold(self, mode: str | None = None) -> None:
        self._ctl.rpc("hold", lambda: self._ctl.set_priority(self.id, 0, user=mode == "user"))

    def release(self) -> None:
        self._ctl.rpc("release", lambda: self._ctl.set_priority(self.id, INFINITE))

    def cancel(self) -> None:
        self.send_signal(9)

    def send_signal(self, signal: int | str, steps: str = "children", hurry: bool = False) -> None:
        self._ctl.rpc("kill_job", lambda: self._ctl.kill(self.id, signal))

    def get_batch_script(self) -> str:
        return self._ctl.rpc("batch_script", lambda: self._ctl.job(self.id).script)


class Jobs(dict[int, Job]):
    """pyslurm.Jobs (a MultiClusterMap in pyslurm; only `.values()` is relied on)."""

    _ctl: ClassVar[Slurmctld]

    @classmethod
    def load(cls, preload_passwd_info: bool = False, frozen: bool = False) -> Jobs:
        def load() -> Jobs:
            job_class: Any = cls._ctl.module.Job
            return cls({r.id: job_class._snapshot(r) for r in cls._ctl.jobs.values()})
        return cls._ctl.rpc("load_jobs", load)


class Node:
    """pyslurm.Node: `Node(name, **writable)`; `Node.load(name)`; `node.modify(Node(...))`."""

    _ctl: ClassVar[Slurmctld]
    _WRITABLE: ClassVar[frozenset[str]] = frozenset({
        "configured_gres", "address", "hostname", "extra", "comment", "weight", "available_features",
        "active_features", "cpu_binding", "state", "reason"})

    def __init__(self, name: str | None = None, **kwargs: Any) -> None:
        self.name = name
        self.state: str | None = None
        self.reason: str | None = None
        self.reason_user: str | None = None
        self.configured_gres: dict[str, int] = {}
        self.partitions: list[str] = []
        for key, value in kwargs.items():
            if key not in self._WRITABLE:
                raise AttributeError(f"attribute '{key}' of 'pyslurm.core.node.Node' objects is not writable")
            if key == "state" and (not isinstance(value, str) or value.upper() not in _NODE_STATES):
                raise ValueError(f"Invalid Node state: {value}")
            setattr(self, key, value)

    @classmethod
    def load(cls, name: str) -> Node:
        def load() -> Node:
            record = cls._ctl.nodes.get(name)
            if record is None:  # slurm_load_node_single answers with no record
                raise RPCError(msg=f"Node '{name}' does not exist")
            return cls._snapshot(record)
        return cls._ctl.rpc("load_node", load)

    @classmethod
    def _snapshot(cls, record: NodeRecord) -> Node:
        node = cls(record.name)
        node.state = cls._ctl.node_state(record)
        node.reason, node.reason_user = record.reason, record.reason_user
        node.configured_gres, node.partitions = dict(record.gres), list(record.partitions)
        return node

    def modify(self, changes: Node) -> None:
        name = self.name or ""
        self._ctl.rpc("update_node", lambda: self._ctl.update_node(name, changes.state, changes.reason))


class Nodes(dict[str, Node]):
    """pyslurm.Nodes (a MultiClusterMap in pyslurm; only `.values()` is relied on)."""

    _ctl: ClassVar[Slurmctld]

    @classmethod
    def load(cls, preload_passwd_info: bool = False) -> Nodes:
        def load() -> Nodes:
            node_class: Any = cls._ctl.module.Node
            return cls({n: node_class._snapshot(r) for n, r in cls._ctl.nodes.items()})
        return cls._ctl.rpc("load_nodes", load)


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
        return base + ("+DRAIN" if node.drain else "")

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
        if wanted in ("DRAIN", "DOWN") and not reason:
            raise RPCError(ESLURM_INVALID_NODE_STATE, "You must specify a reason when DOWNING or DRAINING a node")
        for node in (self.nodes[n] for n in names):
            if wanted in ("DRAIN", "DOWN"):
                node.drain = node.drain or wanted == "DRAIN"
                node.down = node.down or wanted == "DOWN"
                node.reason, node.reason_user = reason, user or self.user
            elif wanted in ("RESUME", "UNDRAIN"):
                node.drain, node.down = False, node.down and wanted == "UNDRAIN"
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
                    if not (r.drain or r.down) and n not in busy and n not in job.excluded_nodes
                    and (not job.required_nodes or n in job.required_nodes)]
            if len(free) >= job.num_nodes:
                job.state, job.nodes, job.state_reason = "RUNNING", tuple(free[:job.num_nodes]), None
                busy.update(job.nodes)
            else:
                job.state_reason = "Resources"
