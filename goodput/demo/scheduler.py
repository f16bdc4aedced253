"""An in-memory (optionally file-backed) Slurm stand-in for tests and the demo.

It keeps the real backends' rules (idempotent no-ops, ownership of drain reasons, permanent
errors for unknown jobs) so workflows exercised against it behave as they will on Slurm. With a
`state_path` its state and journal live in a JSON file under an exclusive lock, so a worker
process that is SIGKILLed and replaced sees exactly what its predecessor did: the durability test
counts drains and requeues in that journal.

Resubmission keeps the real backends' rules too: a job of unknown owner is refused, the copy
belongs to the original's owner, and a retried resubmission recognises its copy only by owner and
token (`goodput.slurm.resubmit.find_copy`). The fake has no accounts to switch to; it records
whom the copy was submitted as in its journal. Its default token key is a fixed, public one: the
fake guards no real jobs, and processes sharing a state file must agree on it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from goodput.demo.cluster import (
    DEMO_UID,
    DEMO_USER,
    FakeClusterState,
    JournalEntry,
    demo_cluster,
    job_in,
    node_in,
    place,
    schedule_pending,
)
from goodput.demo.reservations import FakeReservations
from goodput.identifiers import validate_job_id, validate_node_name, validate_reason
from goodput.scheduler import (
    ActionResult,
    JobInfo,
    JobState,
    JobStatus,
    NodeInfo,
    ResubmitRequest,
    SlurmSwitch,
    status_of,
    statuses_of,
)
from goodput.slurm import rules
from goodput.slurm.commands import validate_environment
from goodput.slurm.optin import DEFAULT_MARKER, NotOptedInError, is_opted_in
from goodput.slurm.resubmit import ResubmitKey, find_copy, tag_comment
from goodput.slurm.submit_as import Account, job_owner, submission_environment

__all__ = ["DEMO_UID", "DEMO_USER", "FAKE_RESUBMIT_KEY", "FakeClusterState", "FakeScheduler", "JournalEntry",
           "demo_cluster"]

T = TypeVar("T")
FAKE_RESUBMIT_KEY = ResubmitKey(b"goodput fake scheduler: not a secret")


class FakeScheduler(FakeReservations):
    """Implements `goodput.scheduler.Scheduler` (reservations: goodput.demo.reservations).

    `action_delay_s` sleeps *after* a mutation is recorded and before it returns, which is the
    nastiest moment for a worker to die: the effect happened, the activity did not complete.
    """

    def __init__(self, state: FakeClusterState | None = None, *, state_path: Path | None = None,
                 action_delay_s: float = 0.0, allow_partitions: Collection[str] = (),
                 comment_marker: str = DEFAULT_MARKER, enforce_opt_in: bool = True,
                 resubmit_key: ResubmitKey | None = None) -> None:
        self.switches: list[SlurmSwitch] = []
        self._memory = state if state is not None else demo_cluster()
        self._resubmit_key = resubmit_key or FAKE_RESUBMIT_KEY
        self._path = state_path
        self._delay = action_delay_s
        self._allow_partitions = tuple(allow_partitions)
        self._marker = comment_marker
        self._enforce_opt_in = enforce_opt_in
        if self._path is not None and not self._path.exists():
            self._path.parent.mkdir(parents=True, exist_ok=True)
            with self._locked() as _:
                pass

    # -- state access ---------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[FakeClusterState]:
        if self._path is None:
            yield self._memory
            return
        lock_path = self._path.with_suffix(self._path.suffix + ".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if self._path.exists() and self._path.stat().st_size:
                    state = FakeClusterState.model_validate_json(self._path.read_text())
                else:
                    state = self._memory
                yield state
                tmp = self._path.with_suffix(".tmp")
                tmp.write_text(state.model_dump_json(indent=1))
                os.replace(tmp, self._path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self, fn: Callable[[FakeClusterState], T]) -> T:
        with self._locked() as state:
            return fn(state)

    def snapshot(self) -> FakeClusterState:
        return self._read(lambda s: s.model_copy(deep=True))

    def journal(self, op: str | None = None) -> list[JournalEntry]:
        return [e for e in self.snapshot().journal if op is None or e.op == op]

    def _opted_in(self, job: JobInfo) -> JobInfo:
        if self._enforce_opt_in and not is_opted_in(job, self._allow_partitions, self._marker):
            raise NotOptedInError(f"job {job.job_id} did not opt in (comment marker {self._marker!r} "
                                  "or an allowlisted partition); goodput leaves it alone")
        return job

    async def _after_mutation(self, changed: bool) -> None:
        if changed and self._delay:
            await asyncio.sleep(self._delay)

    # -- queries --------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> JobInfo:
        validate_job_id(job_id)

        def read(s: FakeClusterState) -> JobInfo:
            schedule_pending(s)
            return job_in(s, job_id)

        return self._read(read)

    async def job_status(self, job_id: str) -> JobStatus:
        return status_of(await self.get_job(job_id))  # the fake keeps one state

    async def list_jobs(self) -> Sequence[JobInfo]:
        return self._read(lambda s: list(s.jobs.values()))

    async def list_job_statuses(self, node: str = "", user_id: int | None = None) -> Sequence[JobStatus]:
        return statuses_of(await self.list_jobs(), node, user_id)  # the fake keeps whole records

    async def get_node(self, name: str) -> NodeInfo:
        validate_node_name(name)
        return self._read(lambda s: node_in(s, name))

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        del partition  # the fake cluster is one partition
        return self._read(lambda s: list(s.nodes.values()))

    async def list_dead_nodes(self) -> Sequence[NodeInfo]:
        return [node for node in await self.list_nodes() if node.dead]

    async def topology(self) -> Sequence[SlurmSwitch]:
        """The switches set on `self.switches` (none by default: a cluster without a topology)."""
        return tuple(self.switches)

    # -- node actions ---------------------------------------------------------------------

    async def drain_node(self, name: str, reason: str) -> ActionResult:
        validate_node_name(name)
        validate_reason(reason)

        def apply(s: FakeClusterState) -> ActionResult:
            node = node_in(s, name)
            noop = rules.drain_noop(node, reason)
            if noop is not None:
                return noop
            s.nodes[name] = node.model_copy(update={"flags": (*node.flags, "DRAIN"),
                                                    "reason": reason, "reason_user": "root"})
            s.journal.append(JournalEntry(op="drain", target=name, detail=reason))
            return ActionResult(changed=True, detail=f"drained {name}")

        result = self._read(apply)
        await self._after_mutation(result.changed)
        return result

    async def resume_node(self, name: str, reason: str) -> ActionResult:
        validate_node_name(name)

        def apply(s: FakeClusterState) -> ActionResult:
            node = node_in(s, name)
            noop = rules.resume_noop(node, reason)
            if noop is not None:
                return noop
            s.nodes[name] = node.model_copy(update={
                "flags": tuple(f for f in node.flags if f != "DRAIN"), "reason": "", "reason_user": ""})
            s.journal.append(JournalEntry(op="resume", target=name, detail=reason))
            return ActionResult(changed=True, detail=f"resumed {name}")

        return self._read(apply)

    # -- job actions ----------------------------------------------------------------------

    async def requeue_job(self, job_id: str, *, hold: bool = False, known: JobInfo | None = None,
                          fresh: bool = False) -> ActionResult:
        del known, fresh  # reads the whole job again: one call, as before
        validate_job_id(job_id)

        def apply(s: FakeClusterState) -> ActionResult:
            job = self._opted_in(job_in(s, job_id))
            if rules.is_requeued(job):
                return ActionResult(changed=False, detail=f"job {job_id} is already pending (requeued)")
            nodes = place(s, len(job.nodes) or 1, job.excluded_nodes, freeing=job.nodes, job_id=job_id)
            state = JobState.PENDING if hold or nodes is None else JobState.RUNNING
            # A pending job keeps its old node list here only so the fake remembers its size.
            s.jobs[job_id] = job.model_copy(update={
                "state": state, "restart_count": job.restart_count + 1, "held": hold,
                "nodes": nodes or job.nodes,
                "state_reason": "JobHeldUser" if hold else ("" if nodes else "Resources")})
            s.journal.append(JournalEntry(op="requeue", target=job_id, detail=f"hold={hold}"))
            return ActionResult(changed=True, detail=f"requeued {job_id}")

        result = self._read(apply)
        await self._after_mutation(result.changed)
        return result

    async def resubmit_job(self, job_id: str, request: ResubmitRequest) -> ActionResult:
        validate_job_id(job_id)
        for node in request.exclude:
            validate_node_name(node)
        validate_environment(request.environment)
        token = self._resubmit_key.token(job_id, request.incident_id)

        def apply(s: FakeClusterState) -> ActionResult:
            job = self._opted_in(job_in(s, job_id))
            owner, uid = job_owner(job)
            # the same environment rule as the real backends (GOODPUT_* only), though nothing runs
            submission_environment(Account(name=owner, uid=uid, gid=job.group_id or uid), resume=request.environment)
            copy = find_copy(s.jobs.values(), job, token)
            if copy is not None:
                return ActionResult(changed=False, detail=f"{job_id} already resubmitted as {copy.job_id}",
                                    new_job_id=copy.job_id)
            new_id = str(s.next_job_id)
            s.next_job_id += 1
            nodes = place(s, len(job.nodes) or 1, request.exclude, freeing=())
            s.jobs[new_id] = job.model_copy(update={
                "job_id": new_id, "restart_count": 0, "excluded_nodes": request.exclude,
                "comment": tag_comment(job.comment, job_id, token),
                "user": job.user, "user_id": job.user_id, "group_id": job.group_id,
                "state": JobState.RUNNING if nodes and not request.hold else JobState.PENDING,
                "nodes": nodes or job.nodes, "held": request.hold,
                "state_reason": "" if nodes and not request.hold else ("JobHeldUser" if request.hold else "Resources")})
            env = ",".join(f"{k}={v}" for k, v in sorted(request.environment.items()))
            s.journal.append(JournalEntry(op="resubmit", target=job_id,
                                          detail=f"new={new_id} as={owner} exclude={','.join(request.exclude)} "
                                                 f"env={env}"))
            return ActionResult(changed=True, detail=f"resubmitted {job_id} as {new_id} (as {owner})",
                                new_job_id=new_id)

        result = self._read(apply)
        await self._after_mutation(result.changed)
        return result

    async def hold_job(self, job_id: str) -> ActionResult:
        return self._set_job(job_id, "hold", held=True)

    async def release_job(self, job_id: str, *, known: JobInfo | None = None) -> ActionResult:
        del known  # the fake's own state is always at hand
        return self._set_job(job_id, "release", held=False)

    async def cancel_job(self, job_id: str) -> ActionResult:
        validate_job_id(job_id)

        def apply(s: FakeClusterState) -> ActionResult:
            job = self._opted_in(job_in(s, job_id))
            noop = rules.cancel_noop(job)
            if noop is not None:
                return noop
            s.jobs[job_id] = job.model_copy(update={"state": JobState.CANCELLED})
            s.journal.append(JournalEntry(op="cancel", target=job_id))
            return ActionResult(changed=True, detail=f"cancelled {job_id}")

        return self._read(apply)

    async def exclude_nodes(self, job_id: str, nodes: Sequence[str], *, known: JobInfo | None = None) -> ActionResult:
        del known
        validate_job_id(job_id)
        names = [validate_node_name(n) for n in nodes]

        def apply(s: FakeClusterState) -> ActionResult:
            job = self._opted_in(job_in(s, job_id))
            merged = tuple(dict.fromkeys([*job.excluded_nodes, *names]))
            s.jobs[job_id] = job.model_copy(update={"excluded_nodes": merged})
            s.journal.append(JournalEntry(op="exclude", target=job_id, detail=",".join(merged)))
            return ActionResult(changed=merged != job.excluded_nodes,
                                detail=f"job {job_id} now excludes {','.join(merged)}")

        return self._read(apply)

    async def update_dependency(self, job_id: str, dependency: str) -> ActionResult:
        validate_job_id(job_id)

        def apply(s: FakeClusterState) -> ActionResult:
            s.jobs[job_id] = job_in(s, job_id).model_copy(update={"dependency": dependency})
            s.journal.append(JournalEntry(op="dependency", target=job_id, detail=dependency))
            return ActionResult(changed=True, detail=f"job {job_id} now waits on {dependency}")

        return self._read(apply)

    # -- test and demo helpers (not part of the Protocol) ---------------------------------

    def set_job_state(self, job_id: str, state: JobState, **update: Any) -> None:
        def apply(s: FakeClusterState) -> None:
            s.jobs[job_id] = job_in(s, job_id).model_copy(update={"state": state, **update})
        self._read(apply)

    def add_job(self, job: JobInfo) -> None:
        def apply(s: FakeClusterState) -> None:
            s.jobs[job.job_id] = job
        self._read(apply)

    def set_node_state(self, name: str, state: str, *, flags: tuple[str, ...] = (), reason: str = "") -> None:
        """What an operator's `scontrol update State=…` or slurmctld's own verdict would leave."""
        def apply(s: FakeClusterState) -> None:
            s.nodes[name] = node_in(s, name).model_copy(update={"state": state, "flags": flags, "reason": reason})
        self._read(apply)

    def _set_job(self, job_id: str, op: str, *, held: bool) -> ActionResult:
        validate_job_id(job_id)

        def apply(s: FakeClusterState) -> ActionResult:
            job = self._opted_in(job_in(s, job_id))
            noop = rules.hold_noop(job) if held else rules.release_noop(job)
            if noop is not None:
                return noop
            update: dict[str, Any] = {"held": held, "expedite_held": False}
            if not held and job.state is JobState.PENDING:
                # Its remembered nodes are its own last allocation (a requeue held it): as free
                # to it as they were to a plain requeue.
                nodes = place(s, len(job.nodes) or 1, job.excluded_nodes, freeing=job.nodes, job_id=job_id)
                # Released but short of nodes: it waits for resources, as slurmctld would say.
                update |= ({"state": JobState.RUNNING, "nodes": nodes, "state_reason": ""} if nodes
                           else {"state_reason": "Resources"})
            elif held:
                update["state_reason"] = "JobHeldUser"
            s.jobs[job_id] = job.model_copy(update=update)
            s.journal.append(JournalEntry(op=op, target=job_id))
            return ActionResult(changed=True, detail=f"{op} {job_id}")

        return self._read(apply)

