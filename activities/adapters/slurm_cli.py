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
* Slurm's error text becomes Transient/Permanent/UnknownJob/UnknownNode errors.

Between checking a node and draining it there is a window in which an admin could drain it too;
scontrol has no compare-and-set, and the window is one round trip.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from activities.adapters.slurm_runner import CommandResult, CommandRunner, LocalRunner
from goodput.identifiers import validate_job_id, validate_node_name, validate_reason
from goodput.scheduler import (
    ACTIVE_JOB_STATES,
    ActionResult,
    JobInfo,
    NodeInfo,
    PermanentSchedulerError,
    ResubmitRequest,
    UnknownJobError,
    UnknownNodeError,
)
from goodput.slurm import commands, rules
from goodput.slurm.errors import classify, is_pending_execution
from goodput.slurm.jsonout import parse_sinfo_json, parse_squeue_json
from goodput.slurm.optin import DEFAULT_MARKER, NotOptedInError, is_opted_in
from goodput.slurm.records import job_from_record, node_from_record, split_records
from goodput.slurm.resubmit import merged_exclusions, options_from_record, resubmitted_from


class SlurmCliBackend:
    """Implements `goodput.scheduler.Scheduler` with Slurm's command-line tools."""

    def __init__(self, runner: CommandRunner | None = None, *,
                 allow_partitions: Collection[str] = (), comment_marker: str = DEFAULT_MARKER,
                 enforce_opt_in: bool = True) -> None:
        self._runner = runner if runner is not None else LocalRunner()
        self._allow_partitions = frozenset(allow_partitions)
        self._marker = comment_marker
        self._enforce_opt_in = enforce_opt_in
        self._version: tuple[int, int, int] | None = None

    # -- plumbing -------------------------------------------------------------------------

    async def _try(self, argv: Sequence[str], *, stdin: bytes | None = None) -> CommandResult:
        return await self._runner.run(argv, stdin=stdin)

    async def _run(self, argv: Sequence[str], *, stdin: bytes | None = None) -> CommandResult:
        result = await self._try(argv, stdin=stdin)
        if not result.ok:
            raise classify(argv, result.returncode, result.stdout, result.stderr)
        return result

    async def slurm_version(self) -> tuple[int, int, int]:
        """(22, 5, 8) from `scontrol --version`; cached."""
        if self._version is None:
            self._version = commands.parse_version((await self._run(commands.version())).stdout)
        return self._version

    async def _job_record(self, job_id: str) -> dict[str, str]:
        result = await self._run(commands.show_job(job_id))
        records = split_records(result.stdout)
        # an array or het job prints several records; the requested id is the one we want
        for record in records:
            if record.get("JobId") == job_id:
                return record
        if records:
            return records[0]
        raise UnknownJobError(f"unknown job {job_id}")

    def _check_opt_in(self, job: JobInfo) -> None:
        if self._enforce_opt_in and not is_opted_in(job, self._allow_partitions, self._marker):
            raise NotOptedInError(f"job {job.job_id} has not opted in to goodput (comment marker "
                                  f"{self._marker!r} or an allowlisted partition); not touching it")

    async def _opted_in_job(self, job_id: str) -> JobInfo:
        validate_job_id(job_id)
        job = job_from_record(await self._job_record(job_id))
        self._check_opt_in(job)
        return job

    # -- queries --------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> JobInfo:
        validate_job_id(job_id)
        return job_from_record(await self._job_record(job_id))

    async def list_jobs(self) -> Sequence[JobInfo]:
        return parse_squeue_json((await self._run(commands.squeue_json())).stdout)

    async def get_node(self, name: str) -> NodeInfo:
        validate_node_name(name)
        records = split_records((await self._run(commands.show_node(name))).stdout)
        for record in records:
            if record.get("NodeName") == name:
                return node_from_record(record)
        raise UnknownNodeError(f"unknown node {name}")

    async def list_nodes(self) -> Sequence[NodeInfo]:
        return parse_sinfo_json((await self._run(commands.sinfo_json())).stdout)

    # -- node actions ---------------------------------------------------------------------

    async def drain_node(self, name: str, reason: str) -> ActionResult:
        validate_node_name(name)
        validate_reason(reason)
        noop = rules.drain_noop(await self.get_node(name), reason)
        if noop is not None:
            return noop
        await self._run(commands.drain_node(name, reason))
        return ActionResult(changed=True, detail=f"drained {name}")

    async def resume_node(self, name: str, reason: str) -> ActionResult:
        validate_node_name(name)
        validate_reason(reason)
        noop = rules.resume_noop(await self.get_node(name), reason)
        if noop is not None:
            return noop
        await self._run(commands.resume_node(name))
        return ActionResult(changed=True, detail=f"resumed {name}")

    # -- job actions ----------------------------------------------------------------------

    async def requeue_job(self, job_id: str, *, hold: bool = False) -> ActionResult:
        job = await self._opted_in_job(job_id)
        if rules.is_requeued(job):
            return await self._already_pending(job, hold)
        result = await self._try(commands.requeue(job_id, hold=hold))
        if result.ok:
            return ActionResult(changed=True, detail=f"requeued {job_id}{' (held)' if hold else ''}")
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
        validate_job_id(job_id)
        exclude = tuple(validate_node_name(n) for n in request.exclude)
        commands.validate_environment(request.environment)
        record = await self._job_record(job_id)
        self._check_opt_in(job_from_record(record))
        # a retried activity whose first attempt did submit finds that copy instead of a second one
        for other in await self.list_jobs():
            if resubmitted_from(other.comment) == job_id and other.state in ACTIVE_JOB_STATES:
                return ActionResult(changed=False, new_job_id=other.job_id,
                                    detail=f"{job_id} already resubmitted as {other.job_id}")
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
        options = options_from_record(record, exclude=exclude, stdout_pattern=stdout_pattern,
                                      stderr_pattern=stderr_pattern)
        argv = commands.sbatch(options, exclude=merged_exclusions(record, exclude),
                               environment=request.environment, hold=request.hold)
        result = await self._run(argv, stdin=script.encode())
        new_id = commands.parse_sbatch_parsable(result.stdout)
        return ActionResult(changed=True, detail=f"resubmitted {job_id} as {new_id}"
                            f"{' excluding ' + ','.join(exclude) if exclude else ''}",
                            new_job_id=new_id)

    async def hold_job(self, job_id: str) -> ActionResult:
        noop = rules.hold_noop(await self._opted_in_job(job_id))
        if noop is not None:
            return noop
        await self._run(commands.hold(job_id))
        return ActionResult(changed=True, detail=f"held {job_id}")

    async def release_job(self, job_id: str) -> ActionResult:
        noop = rules.release_noop(await self._opted_in_job(job_id))
        if noop is not None:
            return noop
        await self._run(commands.release(job_id))
        return ActionResult(changed=True, detail=f"released {job_id}")

    async def cancel_job(self, job_id: str) -> ActionResult:
        noop = rules.cancel_noop(await self._opted_in_job(job_id))
        if noop is not None:
            return noop
        await self._run(commands.cancel(job_id))
        return ActionResult(changed=True, detail=f"cancelled {job_id}")
