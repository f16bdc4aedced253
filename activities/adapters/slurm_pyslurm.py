"""The Scheduler on pyslurm: Slurm's C API from Python, for sites whose Slurm matches pyslurm.

pyslurm is built against one Slurm release (pyslurm 25.11.x needs libslurm 25.11), so this backend
suits a worker on a head/login node of such a cluster: no subprocess per call, no text parsing.
Elsewhere use the CLI, SSH or REST backend. pyslurm is imported lazily (the `module` argument is
the seam; tests pass `tests.fakes.pyslurm_standin`), so goodput never needs it to import. Its
calls block, so each runs in a thread (`asyncio.to_thread`), one at a time (libslurm keeps
per-thread errno and is not documented as thread-safe). The rules are the other backends'
(`goodput.slurm.rules`, opt-in, identifiers validated before any call, resubmission tagged with an
unforgeable token and deduplicated by owner and token); errors are classified by Slurm's strerror
text like the CLI's. A resubmitted copy is submitted for its owner (`user_id`/`group_id`, which
slurmctld accepts only from root or SlurmUser) with an environment of the owner's identity and
the resume values (`goodput.slurm.submit_as`), never goodput's; pyslurm itself adds the SLURM_*
variables of goodput's environment (docs/slurm.md, "How resubmission runs").

The pyslurm 25.11 API this uses (PySlurm/pyslurm `pyslurm/core/job/job.pyx`,
`pyslurm/core/job/submission.pxd`, `pyslurm/core/node.pyx`, `pyslurm/core/error.pyx`):

* `Job.load(id: int)`, `Jobs.load().values()`; Job attributes `id name state state_reason
  partition allocated_nodes required_nodes excluded_nodes comment is_requeueable requeue_count
  priority exit_code exit_code_signal end_time standard_output standard_error command
  working_directory is_batch_job user_id user_name group_id num_nodes ntasks ntasks_per_node
  cpus_per_task account qos constraints reservation time_limit memory_per_node memory_per_cpu
  gres_per_node array_id array_task_id heterogeneous_id heterogeneous_offset` (absent strings
  are None; read in `pyslurm_jobs`);
* `Job(id).requeue(hold=)`, `.hold()`, `.release()`, `.cancel()`, `.get_batch_script()`;
* `Node.load(name)`, `Nodes.load().values()`; Node `name state reason reason_user
  configured_gres`; `Node(name).modify(Node(state="DRAIN", reason=...))`, `state="RESUME"`;
* `JobSubmitDescription(**attributes).submit() -> int` (`user_id`, `group_id`; `environment` as a
  dict exports only those variables plus SLURM_* of the caller's environment; a `script` that names
  an existing file is read from that file); `RPCError` (`errno`, `msg`).
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from activities.adapters.pyslurm_jobs import (
    field_of,
    job_info,
    refuse_script_that_names_a_file,
    submit_attributes,
    text_of,
)
from activities.adapters.slurm_action import act_unless_done, change_node
from activities.adapters.slurm_owner import AccountDirectory, LocalAccounts, owner_account
from goodput.identifiers import validate_job_id, validate_node_name, validate_reservation
from goodput.scheduler import (
    ActionResult,
    JobInfo,
    JobStatus,
    NodeInfo,
    PermanentSchedulerError,
    ReservationInfo,
    ResubmitRequest,
    SchedulerError,
    SlurmSwitch,
    TransientSchedulerError,
    UnknownJobError,
    UnknownNodeError,
    status_of,
    statuses_of,
)
from goodput.slurm import rules
from goodput.slurm.commands import validate_environment
from goodput.slurm.errors import classify, is_pending_execution
from goodput.slurm.optin import DEFAULT_MARKER, NotOptedInError, is_opted_in
from goodput.slurm.records import node_state
from goodput.slurm.resubmit import ResubmitKey, find_copy
from goodput.slurm.submit_as import DEFAULT_PATH, submission_environment

T = TypeVar("T")
INSTALL_HINT = "pip install 'goodput[pyslurm]'"
# slurm_errno.h: SLURM_UNEXPECTED_MSG_ERROR and SLURM_COMMUNICATIONS_* (1000-1004),
# SLURM_PROTOCOL_AUTHENTICATION_ERROR (1007, munge restarting), SLURMCTLD_COMMUNICATIONS_* (18xx),
# SLURM_PROTOCOL_SOCKET_* (50xx); not the version or plugin errors in between
_TRANSIENT_ERRNOS = (range(1000, 1005), range(1007, 1008), range(1800, 1900), range(5000, 5100))


class PyslurmUnavailableError(PermanentSchedulerError, ImportError):
    """pyslurm cannot be imported on this host (not installed, or built for another libslurm)."""


def load_pyslurm() -> Any:
    try:
        return importlib.import_module("pyslurm")
    except ImportError as exc:
        raise PyslurmUnavailableError(
            f"scheduler slurm-pyslurm needs pyslurm, which cannot be imported here ({exc}); install it with "
            f"`{INSTALL_HINT}` on a host whose Slurm release matches pyslurm's (pyslurm 25.11 needs Slurm "
            "25.11), or use the slurm-cli, slurm-ssh or slurm-rest backend") from exc


def _each(collection: Any) -> list[Any]:
    """The objects in a pyslurm collection: a MultiClusterMap (`.values()`, 23.02.x+) or a list."""
    values = getattr(collection, "values", None)
    return list(values() if callable(values) else collection)


def node_info(node: Any) -> NodeInfo:
    """A NodeInfo from a pyslurm.Node (`state` is node_state_string_complete: IDLE+DRAIN)."""
    state, flags = node_state(text_of(field_of(node, "state")))
    gres = field_of(node, "configured_gres")
    return NodeInfo(name=text_of(node.name), state=state, flags=flags, reason=text_of(field_of(node, "reason")),
                    reason_user=text_of(field_of(node, "reason_user")),
                    gres=",".join(f"{k}:{v}" for k, v in gres.items()) if isinstance(gres, dict) else text_of(gres))


class PyslurmBackend:
    """Implements `goodput.scheduler.Scheduler` with pyslurm's object API."""

    def __init__(self, module: Any | None = None, *, allow_partitions: Collection[str] = (),
                 comment_marker: str = DEFAULT_MARKER, enforce_opt_in: bool = True,
                 resubmit_key: ResubmitKey | None = None, accounts: AccountDirectory | None = None,
                 resubmit_path: str = DEFAULT_PATH) -> None:
        self._m: Any = module if module is not None else load_pyslurm()
        self._rpc_error: type[BaseException] = self._m.RPCError
        self._allow_partitions = frozenset(allow_partitions)
        self._marker = comment_marker
        self._enforce_opt_in = enforce_opt_in
        self._resubmit_key = resubmit_key or ResubmitKey.ephemeral()
        self._accounts = accounts or LocalAccounts()
        self._resubmit_path = resubmit_path
        self._lock = threading.Lock()

    @property
    def pyslurm_version(self) -> str:
        return str(getattr(self._m, "__version__", "unknown"))

    # -- plumbing -------------------------------------------------------------------------

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(self._blocking, what, fn, *args, **kwargs)

    def _blocking(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self._lock:
            try:
                return fn(*args, **kwargs)
            except SchedulerError:
                raise
            except self._rpc_error as exc:
                raise self._classify(what, exc) from None
            except ValueError as exc:  # pyslurm's own checks of a request (e.g. the batch script)
                raise PermanentSchedulerError(f"pyslurm {what}: {exc}") from None
            except OSError as exc:  # e.g. its stat() of a long batch script taken for a path
                raise PermanentSchedulerError(f"pyslurm {what}: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def _classify(what: str, exc: BaseException) -> SchedulerError:
        message = text_of(getattr(exc, "msg", None) or exc) or type(exc).__name__
        errno = getattr(exc, "errno", None)
        if what.startswith("Node") and "does not exist" in message.lower():
            return UnknownNodeError(f"pyslurm {what}: {message}")
        error = classify(["pyslurm", what], 1, "", message)
        if type(error) is PermanentSchedulerError and isinstance(errno, int) and any(
                errno in block for block in _TRANSIENT_ERRNOS):
            return TransientSchedulerError(f"pyslurm {what}: {message} (errno {errno})")
        return error

    def _check_opt_in(self, job: JobInfo) -> None:
        if self._enforce_opt_in and not is_opted_in(job, self._allow_partitions, self._marker):
            raise NotOptedInError(f"job {job.job_id} has not opted in to goodput (comment marker "
                                  f"{self._marker!r} or an allowlisted partition); not touching it")

    async def _numeric_id(self, job_id: str) -> int:
        """pyslurm addresses jobs by integer id; `123_4` and `123+1` are looked up."""
        validate_job_id(job_id)
        if job_id.isdigit():
            return int(job_id)
        base, _, offset = job_id.partition("+")
        array, _, task = base.partition("_")
        wanted = {"array_id": int(array), "array_task_id": int(task)} if task else {"heterogeneous_id": int(array)}
        if offset:
            wanted["heterogeneous_offset"] = int(offset)
        for job in _each(await self._call("Jobs.load", self._m.Jobs.load)):
            if all(field_of(job, key) == value for key, value in wanted.items()):
                return int(job.id)
        raise UnknownJobError(f"unknown job {job_id}")

    async def _load(self, job_id: str) -> tuple[int, Any]:
        number = await self._numeric_id(job_id)
        return number, await self._call(f"Job.load {job_id}", self._m.Job.load, number)

    async def _opted_in(self, job_id: str) -> tuple[int, JobInfo]:
        number, job = await self._load(job_id)
        info = job_info(job)
        self._check_opt_in(info)
        return number, info

    # -- queries --------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> JobInfo:
        return job_info((await self._load(job_id))[1])

    async def job_status(self, job_id: str) -> JobStatus:
        return status_of(await self.get_job(job_id))  # one in-process read, as get_job

    async def list_jobs(self) -> Sequence[JobInfo]:
        return [job_info(job) for job in _each(await self._call("Jobs.load", self._m.Jobs.load))]

    async def list_job_statuses(self, node: str = "", user_id: int | None = None) -> Sequence[JobStatus]:
        # pyslurm loads every job whole; only what is kept narrows
        return statuses_of(await self.list_jobs(), node, user_id)

    async def get_node(self, name: str) -> NodeInfo:
        validate_node_name(name)
        node = await self._call(f"Node.load {name}", self._m.Node.load, name)
        if text_of(node.name) != name:
            raise UnknownNodeError(f"unknown node {name}")
        return node_info(node)

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        # pyslurm loads every node either way; the partition only narrows what is returned (a
        # pyslurm that does not say a node's partitions narrows nothing)
        wanted = set(partition.split(",")) if partition else None

        def kept(node: Any) -> bool:
            listed = getattr(node, "partitions", None)
            return wanted is None or listed is None or bool(wanted & set(listed))

        return [node_info(node) for node in _each(await self._call("Nodes.load", self._m.Nodes.load)) if kept(node)]

    async def list_dead_nodes(self) -> Sequence[NodeInfo]:
        # pyslurm loads every node; the filter only narrows what the watcher holds
        return [node for node in await self.list_nodes() if node.dead]

    # -- node actions ---------------------------------------------------------------------

    async def _update_node(self, name: str, **changes: str) -> None:
        await self._call(f"Node.modify {name}", lambda: self._m.Node(name).modify(self._m.Node(**changes)))

    async def drain_node(self, name: str, reason: str) -> ActionResult:
        return await change_node(name, reason, read=self.get_node, noop=rules.drain_noop,
                                 act=lambda: self._update_node(name, state="DRAIN", reason=reason), done="drained")

    async def resume_node(self, name: str, reason: str) -> ActionResult:
        return await change_node(name, reason, read=self.get_node, noop=rules.resume_noop,
                                 act=lambda: self._update_node(name, state="RESUME"), done="resumed")

    # -- job actions ----------------------------------------------------------------------

    async def requeue_job(self, job_id: str, *, hold: bool = False, known: JobInfo | None = None,
                          fresh: bool = False) -> ActionResult:
        del known, fresh  # reads the whole job again: one call, as before
        number, job = await self._opted_in(job_id)
        if rules.is_requeued(job):
            return await self._already_pending(number, job, hold)
        try:
            await self._call(f"Job.requeue {job_id}", self._m.Job(number).requeue, hold=hold)
        except PermanentSchedulerError as exc:
            if not is_pending_execution(str(exc)):  # requeued a moment ago, still completing
                raise
            return await self._already_pending(number, await self.get_job(job_id), hold)
        return ActionResult(changed=True, detail=f"requeued {job_id}{' (held)' if hold else ''}")

    async def _already_pending(self, number: int, job: JobInfo, hold: bool) -> ActionResult:
        if hold and not job.held and rules.is_requeued(job):
            await self._call(f"Job.hold {job.job_id}", self._m.Job(number).hold)
            return ActionResult(changed=True, detail=f"{job.job_id} was pending; held it")
        return ActionResult(changed=False, detail=f"{job.job_id} already requeued "
                            f"({job.state.value}{', held' if job.held else ''})")

    async def resubmit_job(self, job_id: str, request: ResubmitRequest) -> ActionResult:
        validate_job_id(job_id)
        exclude = tuple(validate_node_name(n) for n in request.exclude)
        validate_environment(request.environment)
        number, job = await self._load(job_id)
        original = job_info(job)
        self._check_opt_in(original)
        owner = await owner_account(original, self._accounts)
        # a retried activity whose first attempt did submit finds that copy instead of a second one
        token = self._resubmit_key.token(job_id, request.incident_id)
        copy = find_copy(await self.list_jobs(), original, token)
        if copy is not None:
            return ActionResult(changed=False, new_job_id=copy.job_id,
                                detail=f"{job_id} already resubmitted as {copy.job_id}")
        if field_of(job, "is_batch_job") is False:
            raise PermanentSchedulerError(f"job {job_id} is not a batch job; it cannot be resubmitted")
        script = await self._call(f"Job.get_batch_script {job_id}", self._m.Job(number).get_batch_script)
        if not isinstance(script, str) or not script.strip():
            raise PermanentSchedulerError(f"job {job_id} has no batch script to resubmit")
        refuse_script_that_names_a_file(job_id, script)
        environment = submission_environment(owner, resume=request.environment, path=self._resubmit_path)
        attrs = submit_attributes(job, job_id, script, owner=owner, token=token, exclude=exclude,
                                  environment=environment, hold=request.hold)
        new_id = str(await self._call("JobSubmitDescription.submit",
                                      lambda: self._m.JobSubmitDescription(**attrs).submit()))
        return ActionResult(changed=True, detail=f"resubmitted {job_id} as {new_id} (as {owner.name})"
                            f"{' excluding ' + ','.join(exclude) if exclude else ''}", new_job_id=new_id)

    async def _change_job(self, job_id: str, noop: Callable[[JobInfo], ActionResult | None], method: str,
                          done: str) -> ActionResult:
        """Job `job_id`'s `Job.<method>()` unless `noop` says it is already so."""
        async def act(state: tuple[int, JobInfo]) -> None:
            await self._call(f"Job.{method} {job_id}", getattr(self._m.Job(state[0]), method))

        return await act_unless_done(lambda: self._opted_in(job_id), lambda state: noop(state[1]), act,
                                     f"{done} {job_id}")

    async def hold_job(self, job_id: str) -> ActionResult:
        return await self._change_job(job_id, rules.hold_noop, "hold", "held")

    async def release_job(self, job_id: str, *, known: JobInfo | None = None) -> ActionResult:
        del known  # one library call reads the job anyway
        return await self._change_job(job_id, rules.release_noop, "release", "released")

    async def exclude_nodes(self, job_id: str, nodes: Sequence[str], *, known: JobInfo | None = None) -> ActionResult:
        del known
        validate_job_id(job_id)
        raise PermanentSchedulerError(f"the pyslurm backend does not update excluded nodes (job {job_id})")

    async def update_dependency(self, job_id: str, dependency: str) -> ActionResult:
        validate_job_id(job_id)
        # pyslurm's modify path for dependencies is not wired here; the chain is reported instead.
        raise PermanentSchedulerError(f"the pyslurm backend does not update dependencies (job {job_id})")

    async def topology(self) -> Sequence[SlurmSwitch]:
        # pyslurm has no topology API: the breaker uses the configured switch map only.
        raise PermanentSchedulerError("the pyslurm backend does not read the topology")

    # The hot-spare pool is not wired to pyslurm's Reservation API: recovery then queues normally
    # and the incident says why (goodput.recover.spares).
    async def get_reservation(self, name: str) -> ReservationInfo:
        raise PermanentSchedulerError(f"the pyslurm backend does not read reservations ({validate_reservation(name)})")

    async def allow_reservation_user(self, name: str, user: str) -> ActionResult:
        raise PermanentSchedulerError(f"the pyslurm backend does not update reservations "
                                      f"({validate_reservation(name)})")

    async def disallow_reservation_user(self, name: str, user: str) -> ActionResult:
        raise PermanentSchedulerError(f"the pyslurm backend does not update reservations "
                                      f"({validate_reservation(name)})")

    async def use_reservation(self, job_id: str, name: str) -> ActionResult:
        validate_job_id(job_id)
        raise PermanentSchedulerError(f"the pyslurm backend does not move jobs into reservations "
                                      f"({validate_reservation(name)})")

    async def add_reservation_nodes(self, name: str, nodes: Sequence[str]) -> ActionResult:
        raise PermanentSchedulerError(f"the pyslurm backend does not update reservations "
                                      f"({validate_reservation(name)})")

    async def cancel_job(self, job_id: str) -> ActionResult:
        return await self._change_job(job_id, rules.cancel_noop, "cancel", "cancelled")

