"""The Scheduler backend that drives Slurm's own commands (scontrol, squeue, sinfo, sbatch, scancel).

Deployment: goodput's worker on a head/login node runs them locally (`LocalRunner`); the SSH
backend runs the very same argv on a login node (`slurm_ssh.SshRunner`). Only the runner differs,
so both keep the rules every backend keeps (decided in `goodput.slurm.rules`, which the REST
backend shares):

* idempotent: draining a drained node, requeueing a requeued job, holding a held job... return
  `ActionResult(changed=False)` instead of failing or acting twice;
* goodput owns only what it did: a node drained (or taken down) by someone else, or drained by
  goodput for another incident, is never resumed (NotOwnedError) nor has its reason overwritten;
* opt-in: job mutations refuse jobs that neither carry the comment marker nor sit in an
  allowlisted partition (NotOptedInError);
* identifiers are validated before anything runs;
* a resubmitted copy is submitted as the job's owner from a clean environment, never as goodput,
  and a retried resubmission recognises its copy only by owner and an unforgeable token
  (`goodput.slurm.submit_as`, `goodput.slurm.resubmit`);
* Slurm's error text becomes Transient/Permanent/UnknownJob/UnknownNode errors;
* a job or node is read only from output no job can have shaped into another one: on 23.02+
  `scontrol --json show`, on 22.05 the `-o` text when `goodput.slurm.unambiguous` trusts it and
  otherwise the job's (node's) entry in `squeue --json` (`sinfo --json`), found by its id.

Between checking a node and draining it there is a window in which an admin could drain it too;
scontrol has no compare-and-set, and the window is one round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

from activities.adapters import slurm_batch
from activities.adapters.job_scan import owners_jobs
from activities.adapters.slurm_action import act_unless_done, change_node
from activities.adapters.slurm_batch import DEFAULT_MAX_WAIT_S, DEFAULT_TICK_S, Coalescer, Kind, Outcome, Share
from activities.adapters.slurm_cli_reservations import SlurmReservations
from activities.adapters.slurm_owner import (
    AccountDirectory,
    OwnerSubmission,
    accounts_for,
    owner_sbatch,
    owner_switch_failed,
)
from activities.adapters.slurm_runner import MAX_OUTPUT, CommandResult, CommandRunner, LocalRunner
from goodput.identifiers import validate_job_id, validate_node_name
from goodput.scheduler import (
    ACTIVE_JOB_STATES,
    ActionResult,
    JobInfo,
    JobStatus,
    NodeInfo,
    PermanentSchedulerError,
    ResubmitRequest,
    SlurmSwitch,
    UnknownNodeError,
    status_of,
    statuses_of,
    with_status,
)
from goodput.slurm import batch, commands, rules
from goodput.slurm.errors import SlurmRecordError, classify, is_pending_execution
from goodput.slurm.jsonout import find_job, find_job_object, load, parse_sinfo_json, parse_squeue_json
from goodput.slurm.jsonrecord import record_from_json
from goodput.slurm.optin import DEFAULT_MARKER, NotOptedInError, is_opted_in
from goodput.slurm.records import job_from_record, node_from_record
from goodput.slurm.resubmit import ResubmitKey, find_copy, merged_exclusions, options_from_record
from goodput.slurm.submit_as import OwnerError, job_owner
from goodput.slurm.topology import parse_topology
from goodput.slurm.unambiguous import job_record, node_record

log = logging.getLogger(__name__)

JSON_SCONTROL = (23, 2, 0)
# Job commands a storm's incidents share (activities/adapters/slurm_batch.py); ids are Slurm's own.
REQUEUE = Kind("requeue", commands.requeue, batch.requeue_many, per_item_errors=True)
REQUEUE_HOLD = Kind("requeuehold", lambda j: commands.requeue(j, hold=True),
                    lambda ids: batch.requeue_many(ids, hold=True), per_item_errors=True)
RELEASE = Kind("release", commands.release, batch.release_many, per_item_errors=True)


def _exclude(nodes: tuple[str, ...]) -> Kind:
    """Exclusions coalesce only with exclusions of the same merged list: Slurm sets one list for all."""
    return Kind("exclude", lambda j: commands.exclude_nodes(j, nodes), lambda ids: batch.exclude_many(ids, nodes),
                per_item_errors=True)


def _drain(reason: str) -> Kind:
    """Drains coalesce only with drains of the same reason: the reason names the owning incident."""
    return Kind("drain", lambda n: commands.drain_node(n, reason), lambda ns: batch.drain_many(ns, reason),
                per_item_errors=False)


@functools.lru_cache(maxsize=1)
def _parsed_scan(answer: str) -> tuple[JobStatus, ...]:
    """`parse_scan`, once for the callers of one tick that share the answer."""
    return tuple(batch.parse_scan(answer))


def _the_node(nodes: Sequence[NodeInfo], name: str) -> NodeInfo:
    """Node `name` of a JSON listing (never another one)."""
    for node in nodes:
        if node.name == name:
            return node
    raise UnknownNodeError(f"unknown node {name}")


class SlurmCliBackend(SlurmReservations):
    """Implements `goodput.scheduler.Scheduler` with Slurm's command-line tools."""

    def __init__(self, runner: CommandRunner | None = None, *,
                 allow_partitions: Collection[str] = (), comment_marker: str = DEFAULT_MARKER,
                 enforce_opt_in: bool = True, resubmit_key: ResubmitKey | None = None,
                 submission: OwnerSubmission | None = None, accounts: AccountDirectory | None = None,
                 coalesce_tick_s: float = DEFAULT_TICK_S) -> None:
        self._runner = runner if runner is not None else LocalRunner()
        # One per backend, and a worker process builds one backend: requeues, releases and drains
        # of one tick go to Slurm as one command (0 turns it off)
        self._coalescer = Coalescer(self._runner, tick_s=coalesce_tick_s,
                                    max_wait_s=max(coalesce_tick_s, DEFAULT_MAX_WAIT_S))
        self._draining: dict[str, str] = {}  # node -> reason of a drain this process is sending
        self._allow_partitions = frozenset(allow_partitions)
        self._marker = comment_marker
        self._enforce_opt_in = enforce_opt_in
        self._version: tuple[int, int, int] | None = None
        self._version_lock = asyncio.Lock()
        # Workers pass the deployment's key; a random one still makes tags unforgeable, but only
        # this instance recognises its copies.
        self._resubmit_key = resubmit_key or ResubmitKey.ephemeral()
        self._submission = submission or OwnerSubmission()
        self._accounts = accounts or accounts_for(self._runner)

    async def aclose(self) -> None:
        """Close the runner's connection, if it keeps one (SSH does; local commands do not)."""
        close = getattr(self._runner, "close", None)
        if close is not None:
            await close()

    # -- plumbing -------------------------------------------------------------------------

    async def _try(self, argv: Sequence[str], *, stdin: bytes | None = None) -> CommandResult:
        return await self._runner.run(argv, stdin=stdin)

    async def _run(self, argv: Sequence[str], *, stdin: bytes | None = None) -> CommandResult:
        result = await self._try(argv, stdin=stdin)
        if not result.ok:
            raise classify(argv, result.returncode, result.stdout, result.stderr)
        return result

    async def slurm_version(self) -> tuple[int, int, int]:
        """(22, 5, 8) from `scontrol --version`; cached (a storm's first reads ask it once, not once each)."""
        async with self._version_lock:
            if self._version is None:
                self._version = commands.parse_version((await self._run(commands.version())).stdout)
        return self._version

    async def _has_json(self) -> bool:
        """Whether scontrol prints JSON (23.02+); an unreadable version reads as 22.05."""
        return await self.slurm_version() >= JSON_SCONTROL

    async def _job_record(self, job_id: str) -> dict[str, str]:
        """Job `job_id`'s `scontrol show job -o` record, only when it can be trusted; otherwise a
        SlurmRecordError (resubmission refuses; reads use `get_job`, which falls back to JSON)."""
        return job_record((await self._run(commands.show_job(job_id))).stdout, job_id)

    async def _job_json(self, job_id: str) -> dict[str, Any]:
        """A JSON document holding job `job_id` (and, on 22.05, every other job)."""
        if await self._has_json():
            return load((await self._run(commands.show_job_json(job_id))).stdout)
        # 22.05's squeue --json ignores -j and lists every job
        return load((await self._run(commands.squeue_json())).stdout)

    async def _job_from_json(self, job_id: str) -> JobInfo:
        # 22.05 prints output patterns there (out-%j.log), 23.02+'s scontrol the files
        return find_job(await self._job_json(job_id), job_id, expand_output=not await self._has_json())

    async def _resubmit_record(self, job_id: str) -> dict[str, str]:
        """The record resubmission reads its options from: the text where it reads one way, else
        the job's JSON written as the same keys (a comment like `Project=x` is no reason to fail)."""
        if not await self._has_json():
            with contextlib.suppress(SlurmRecordError):
                return await self._job_record(job_id)
        return record_from_json(find_job_object(await self._job_json(job_id), job_id))

    def _ok(self, result: CommandResult) -> CommandResult:
        if not result.ok:
            raise classify(result.argv, result.returncode, result.stdout, result.stderr)
        return result

    async def _job_command(self, kind: Kind, job_id: str, job: JobInfo, key: tuple[str, ...] = ()) -> Outcome:
        """`kind` for the job, batched with others of this tick (and `key`) when the id Slurm's own
        record gives is a plain job number equal to the one asked for; otherwise alone, as before."""
        if job.job_id == job_id and batch.batchable_job(job_id):
            return await self._coalescer.run(kind, key, job_id)
        argv = tuple(kind.single(job_id))
        return Outcome(await self._try(argv), Share(1, argv))

    def _check_opt_in(self, job: JobInfo) -> None:
        if self._enforce_opt_in and not is_opted_in(job, self._allow_partitions, self._marker):
            raise NotOptedInError(f"job {job.job_id} has not opted in to goodput (comment marker "
                                  f"{self._marker!r} or an allowlisted partition); not touching it")

    async def _opted_in_job(self, job_id: str) -> JobInfo:
        job = await self.get_job(job_id)
        self._check_opt_in(job)
        return job

    async def _known_or_read(self, job_id: str, known: JobInfo | None) -> JobInfo:
        """The caller's record with its state read again (batched: #29), else the whole job."""
        if known is None or known.job_id != job_id:
            return await self._opted_in_job(job_id)
        self._check_opt_in(known)
        return with_status(known, await self.job_status(job_id))

    # -- queries --------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> JobInfo:
        validate_job_id(job_id)
        if await self._has_json():
            return await self._job_from_json(job_id)
        try:
            record = await self._job_record(job_id)
        except SlurmRecordError:
            return await self._job_from_json(job_id)  # the text could be read more than one way
        if record["BatchFlag"] == "1" and "StdOut" not in record:
            return await self._job_from_json(job_id)  # its output path could not be told apart
        return job_from_record(record)

    async def job_status(self, job_id: str) -> JobStatus:
        # A storm's polls share one read per tick; a job it does not plainly answer is read alone.
        if batch.batchable_job(validate_job_id(job_id)):
            status = await slurm_batch.read_status(self._coalescer, job_id)
            if status is not None:
                return status
        return status_of(await self.get_job(job_id))

    async def list_jobs(self) -> Sequence[JobInfo]:
        return parse_squeue_json((await self._run(commands.squeue_json())).stdout)

    async def list_job_statuses(self, node: str = "", user_id: int | None = None) -> Sequence[JobStatus]:
        # a line per job, where `squeue --json` is every job's whole record: 54-115 MB at 20,000 jobs
        if node and user_id is None:  # one tick's node lookups share one list (#29)
            answer = self._ok(await slurm_batch.read_node_jobs(self._coalescer, validate_node_name(node))).stdout
        else:
            answer = (await self._run(batch.squeue_scan(node, user_id))).stdout
        try:
            if len(answer) < MAX_OUTPUT:  # at the bound it may have been cut at a line's end
                return [line for line in _parsed_scan(answer) if not node or node in line.nodes]
        except ValueError as err:
            log.warning("squeue's job lines could not be read, reading the jobs' records: %s", err)
        return statuses_of(await self.list_jobs(), node, user_id)

    async def get_node(self, name: str) -> NodeInfo:
        validate_node_name(name)
        if await self._has_json():
            return _the_node(parse_sinfo_json((await self._run(commands.show_node_json(name))).stdout), name)
        try:
            # a storm's reads of its nodes (the links', the drains') share one command per tick
            answer = self._ok(await slurm_batch.read_node_line(self._coalescer, name))
            return node_from_record(node_record(answer.stdout, name))
        except SlurmRecordError:
            return _the_node(await self.list_nodes(), name)

    async def list_nodes(self, partition: str = "") -> Sequence[NodeInfo]:
        if partition:  # text: 22.05's `sinfo --json` ignores -p and lists the whole cluster
            try:
                return batch.parse_partition_nodes((await self._run(batch.sinfo_partition(partition))).stdout)
            except ValueError as err:
                raise PermanentSchedulerError(f"sinfo for partition {partition}: {err}") from None
        return parse_sinfo_json((await self._run(commands.sinfo_json())).stdout)

    async def list_dead_nodes(self) -> Sequence[NodeInfo]:
        # text, filtered by sinfo itself: a line per troubled node, not the whole cluster in JSON
        try:
            return [n for n in batch.parse_dead_nodes((await self._run(batch.sinfo_dead_nodes())).stdout) if n.dead]
        except ValueError as err:
            raise PermanentSchedulerError(f"sinfo of the dead nodes: {err}") from None

    async def topology(self) -> Sequence[SlurmSwitch]:
        return parse_topology((await self._run(commands.show_topology())).stdout)

    # -- node actions ---------------------------------------------------------------------

    async def drain_node(self, name: str, reason: str) -> ActionResult:
        shares: list[Share] = []
        lost: list[str] = []

        async def act() -> None:
            # Two incidents that read the node undrained in one tick: the first drains it, the
            # second finds it being drained (as it would find it drained a moment later), so the
            # tick never turns that race into a second reason replacing the first.
            other = self._draining.get(name)
            if other is not None and other != reason:
                lost.append(other)
                return
            self._draining[name] = reason
            try:
                outcome = await self._coalescer.run(_drain(reason), (reason,), name)
            finally:
                if self._draining.get(name) == reason:
                    del self._draining[name]
            self._ok(outcome.result)
            shares.append(outcome.share)

        result = await change_node(name, reason, read=self.get_node, noop=rules.drain_noop, act=act, done="drained")
        if lost:
            return ActionResult(changed=False, detail=f"{name} already being drained by goodput: {lost[0]}")
        return result.model_copy(update={"detail": result.detail + shares[0].note()}) if shares else result

    async def resume_node(self, name: str, reason: str) -> ActionResult:
        return await change_node(name, reason, read=self.get_node, noop=rules.resume_noop,
                                 act=lambda: self._run(commands.resume_node(name)), done="resumed")

    # -- job actions ----------------------------------------------------------------------

    async def requeue_job(self, job_id: str, *, hold: bool = False, known: JobInfo | None = None,
                          fresh: bool = False) -> ActionResult:
        if known is not None and known.job_id == job_id:
            self._check_opt_in(known)  # then only its state is read again, batched with the tick's others
            job = known if fresh else with_status(known, await self.job_status(job_id))
        else:
            job = await self._opted_in_job(job_id)
        if rules.is_requeued(job):
            return await self._already_pending(job, hold)
        outcome = await self._job_command(REQUEUE_HOLD if hold else REQUEUE, job_id, job)
        result = outcome.result
        if result.ok:
            return ActionResult(changed=True, detail=f"requeued {job_id}{' (held)' if hold else ''}"
                                                     f"{outcome.share.note()}")
        if is_pending_execution(result.stderr):  # requeued a moment ago, still completing
            return await self._already_pending(await self.get_job(job_id), hold)
        raise classify(result.argv, result.returncode, result.stdout, result.stderr)

    async def _already_pending(self, job: JobInfo, hold: bool) -> ActionResult:
        if hold and not job.held and rules.is_requeued(job):
            await self._run(commands.hold(job.job_id))
            return ActionResult(changed=True, detail=f"{job.job_id} was pending; held it")
        return ActionResult(changed=False, detail=f"{job.job_id} already requeued "
                            f"({job.state.value}{', held' if job.held else ''})")

    async def resubmit_job(self, job_id: str, request: ResubmitRequest) -> ActionResult:
        """Submit a copy of the job as its owner, from a clean environment (docs/slurm.md, "How
        resubmission runs"); refuses (OwnerError) rather than submit it as anyone else."""
        validate_job_id(job_id)
        exclude = tuple(validate_node_name(n) for n in request.exclude)
        commands.validate_environment(request.environment)
        record = await self._resubmit_record(job_id)
        original = job_from_record(record)
        self._check_opt_in(original)
        job_owner(original)  # an unknown owner is refused before anything else runs
        # a retried activity whose first attempt did submit finds that copy instead of a second one
        token = self._resubmit_key.token(job_id, request.incident_id)
        copy = find_copy(await owners_jobs(self, original, ACTIVE_JOB_STATES), original, token)
        if copy is not None:
            return ActionResult(changed=False, new_job_id=copy.job_id,
                                detail=f"{job_id} already resubmitted as {copy.job_id}")
        if record.get("BatchFlag", "1") != "1":
            raise PermanentSchedulerError(f"job {job_id} is not a batch job; it cannot be resubmitted")
        script = (await self._run(commands.batch_script(job_id))).stdout
        if not script.strip():
            raise PermanentSchedulerError(f"job {job_id} has no batch script to resubmit")
        patterns = await self._try(commands.squeue_output_patterns(job_id))
        stdout_pattern, stderr_pattern = "", ""
        if patterns.ok:
            fields = patterns.stdout.strip().split("|")
            if len(fields) >= 2:
                stdout_pattern, stderr_pattern = fields[0].strip(), fields[1].strip()
        options = options_from_record(record, token=token, exclude=exclude, stdout_pattern=stdout_pattern,
                                      stderr_pattern=stderr_pattern)
        sbatch = commands.sbatch(options, exclude=merged_exclusions(record, exclude), hold=request.hold)
        argv = await owner_sbatch(original, sbatch, request.environment, accounts=self._accounts,
                                  submission=self._submission)
        result = await self._try(argv, stdin=script.encode())
        if not result.ok:
            if owner_switch_failed(argv, result.returncode, result.stderr):
                raise OwnerError(f"cannot submit job {job_id}'s copy as {original.user}: "
                                 f"{' '.join(result.stderr.split())[:300]}")
            raise classify(argv, result.returncode, result.stdout, result.stderr)
        new_id = commands.parse_sbatch_parsable(result.stdout)
        return ActionResult(changed=True, detail=f"resubmitted {job_id} as {new_id} (as {original.user})"
                            f"{' excluding ' + ','.join(exclude) if exclude else ''}",
                            new_job_id=new_id)

    async def _change_job(self, job_id: str, noop: Callable[[JobInfo], ActionResult | None],
                          argv: Sequence[str], done: str) -> ActionResult:
        return await act_unless_done(lambda: self._opted_in_job(job_id), noop, lambda _: self._run(argv),
                                     f"{done} {job_id}")

    async def hold_job(self, job_id: str) -> ActionResult:
        return await self._change_job(job_id, rules.hold_noop, commands.hold(job_id), "held")

    async def release_job(self, job_id: str, *, known: JobInfo | None = None) -> ActionResult:
        job = await self._known_or_read(job_id, known)
        skip = rules.release_noop(job)
        if skip is not None:
            return skip
        outcome = await self._job_command(RELEASE, job_id, job)
        self._ok(outcome.result)
        return ActionResult(changed=True, detail=f"released {job_id}{outcome.share.note()}")

    async def exclude_nodes(self, job_id: str, nodes: Sequence[str], *, known: JobInfo | None = None) -> ActionResult:
        # the excluded list of `known`: only goodput changed the job since (a requeue keeps the list)
        job = await self._known_or_read(job_id, known)
        merged = tuple(dict.fromkeys([*job.excluded_nodes, *(validate_node_name(n) for n in nodes)]))
        if merged == job.excluded_nodes:
            return ActionResult(changed=False, detail=f"job {job_id} already excludes {','.join(nodes)}")
        outcome = await self._job_command(_exclude(merged), job_id, job, (",".join(merged),))
        self._ok(outcome.result)
        return ActionResult(changed=True, detail=f"job {job_id} now excludes {','.join(merged)}{outcome.share.note()}")

    async def update_dependency(self, job_id: str, dependency: str) -> ActionResult:
        await self._run(commands.update_dependency(job_id, dependency))
        return ActionResult(changed=True, detail=f"job {job_id} now waits on {dependency}")

    async def cancel_job(self, job_id: str) -> ActionResult:
        return await self._change_job(job_id, rules.cancel_noop, commands.cancel(job_id), "cancelled")
