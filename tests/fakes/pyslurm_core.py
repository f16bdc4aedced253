"""The stand-in's pyslurm classes (see `tests.fakes.pyslurm_standin`): `RPCError` with Slurm's errno
values and strerror text, `Job`/`Jobs` and `Node`/`Nodes`, mirroring pyslurm 25.11's
`core/error.pyx`, `core/job/job.pyx` and `core/node.pyx` in names, argument shapes and value types.

Apart from the controller because these are what the backend sees of pyslurm (each loads a
snapshot or forwards one RPC to `Slurmctld`, which holds the state and Slurm's rules), as
`pyslurm_submission.py` is for `JobSubmitDescription`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from goodput.slurm.hostlist import compress_hostlist

if TYPE_CHECKING:
    from tests.fakes.pyslurm_standin import JobRecord, NodeRecord, Slurmctld


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

