"""The recovery steps as Temporal activities: thin adapters from the workflow to the seams.

Each activity validates nothing the domain does not already validate, decides nothing the policy
does not already decide, and is idempotent because Temporal runs activities at least once: every
effect first checks the scheduler's state (a node drained with this incident's reason, a job whose
restart count already moved, a resubmitted job carrying this incident's key). Scheduler errors are
mapped to retryable or non-retryable ApplicationErrors in one place (activities.scheduler_calls);
the resume's two sequences live in activities.resume. What the actions did is counted once each
however often an activity is retried (activities.metrics).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from opentelemetry.metrics import Meter
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.adapters.audit import MemoryAuditLog
from activities.adapters.checkpoints import OwnerCheckpointFinder
from activities.adapters.node_health import CommandNodeCheck
from activities.job_chains import hold_successors
from activities.metrics import RecoveryMetrics
from activities.node_return import NodeReturnActivities
from activities.progress import ProgressReader
from activities.resume import requeue, resubmit
from activities.scheduler_calls import heartbeating, mapped
from activities.topology import SwitchMap
from goodput.checkpoints import CheckpointFinder
from goodput.checkpoints.finder import find_for_job
from goodput.detect.nvrx_cycles import cycle_note
from goodput.diagnose.attribution import attribute
from goodput.diagnose.layout import JobLayout, LayoutSource, wants_layout
from goodput.diagnose.node_memory import LocalNodeMemory, MemoryVerdict, NodeMemory
from goodput.diagnose.provenance import pushed_files, sort_evidence
from goodput.models import Anomaly
from goodput.ownership import drain_reason
from goodput.recover.audit import AuditAction, AuditLog
from goodput.recover.breaker import BreakerPolicy, DrainGate, DrainVerdict
from goodput.recover.capacity import capacity_note
from goodput.recover.consults import MemoryTrustInput, MemoryTrustResult, told_together
from goodput.recover.incident import (
    AttributeInput,
    AttributeResult,
    AuditInput,
    CheckpointInput,
    CheckpointResult,
    IsolateInput,
    IsolateResult,
    MemoryInput,
    Notification,
    ReserveInput,
    ResumeInput,
    ResumeResult,
    StopInput,
    VerifyInput,
    VerifyResult,
)
from goodput.recover.kill_switch import KillSwitchReader, KillSwitchState
from goodput.recover.node_health import NodeCheck, NodeHealthStarter
from goodput.recover.notify import Notifier
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.recover.trust import LocalTrustRecord, RuleAutonomy, TrustInput, TrustRecord
from goodput.scheduler import (
    JobInfo,
    JobState,
    JobStatus,
    Scheduler,
    SchedulerError,
    UnknownJobError,
)
from goodput.untrusted_files import file_owners

# Slurm's pending reasons that mean "no healthy nodes free yet", not "something is wrong".
CAPACITY_REASONS = frozenset({"Resources", "Priority", "ReqNodeNotAvail", "Nodes_required_for_job_are_DOWN",
                              "NodeDown", "PartitionNodeLimit", "QOSGrpNodeLimit", "BeginTime"})


CAPACITY_NOTE_EVERY_S = 30.0
MAX_SLEEP_TO_ELIGIBLE_S = 300.0  # Slurm's requeue delay is cred_expire + 1 s: 121 s by default


def waiting_for_capacity(reason: str) -> bool:
    return reason.split(",")[0].split(" ")[0] in CAPACITY_REASONS


def until_next_poll(now: float, interval_s: float) -> float:
    """Seconds to the next multiple of the interval on this process's clock (at least half an
    interval away), so the polls of a storm's incidents fall on the same instants and go to Slurm
    together (the CLI backend batches the reads of one tick)."""
    if interval_s <= 0:
        return 0.0
    wait = interval_s - now % interval_s
    return wait + interval_s if wait < interval_s / 2 else wait


def next_poll_in(job: JobStatus, now: float, interval_s: float, latest: float) -> float:
    """The next aligned poll, or, while Slurm says the job may not start before a time (its
    requeue delay: `cred_expire` + 1 s, 121 s by default), that time: the polls in between could
    only find it pending (issue #29). `latest` bounds the sleep (the capacity deadline). A time
    further ahead than any requeue delay is not slept to: a `--begin` of the job's own, or squeue
    run over SSH on a host whose time zone differs (its times are that host's local time)."""
    wait = until_next_poll(now, interval_s)
    if job.state is JobState.PENDING and job.state_reason == "BeginTime" and job.eligible_at is not None:
        ahead = job.eligible_at - time.time()
        if ahead <= MAX_SLEEP_TO_ELIGIBLE_S:
            wait = max(wait, min(ahead, latest - now))
    return wait


class RecoveryActivities(NodeReturnActivities):
    """Bound to one scheduler and one notifier; registered on the worker as methods (the
    return-to-service ones inherited from activities.node_return)."""

    def __init__(self, scheduler: Scheduler, notifier: Notifier, gate: DrainGate,
                 checkpoint_finder: CheckpointFinder | None = None, memory: NodeMemory | None = None,
                 audit_log: AuditLog | None = None, kill_switch: KillSwitchReader | None = None,
                 node_check: NodeCheck | None = None, node_health: NodeHealthStarter | None = None,
                 meter: Meter | None = None, layouts: LayoutSource | None = None,
                 policy: Policy | None = None, trust: TrustRecord | None = None) -> None:
        self._scheduler = scheduler
        self._switch_map = SwitchMap(scheduler)
        self._trust = trust or LocalTrustRecord()
        self._policy = policy or Policy()
        self._layouts = layouts
        self._metrics = RecoveryMetrics(meter)
        self._node_check = node_check or CommandNodeCheck()
        self._node_health = node_health
        self._kill_switch = kill_switch
        self.audit_log: AuditLog = audit_log or MemoryAuditLog()
        self._notifier = notifier
        self._gate = gate
        self._memory = memory or LocalNodeMemory()
        # Reads each job's checkpoint tree as the job's owner where goodput can switch users.
        self._checkpoints = checkpoint_finder or OwnerCheckpointFinder()

    @activity.defn(name="reserve_drain")
    async def reserve_drain(self, request: ReserveInput) -> DrainVerdict:
        async with heartbeating():
            policy = await self._switch_map.applied(request.policy)
            return await self._gate.reserve(request.cluster, request.request, policy)

    @activity.defn(name="consult_node_memory")
    async def consult_node_memory(self, request: MemoryInput) -> MemoryVerdict:
        async with heartbeating():
            return await self._memory.consult(request.cluster, request.observation, request.policy)

    @activity.defn(name="consult_memory_and_trust")
    async def consult_memory_and_trust(self, request: MemoryTrustInput) -> MemoryTrustResult:
        """Both entity consults in one round trip (goodput.recover.consults): the record hears the
        recommendation only when the memory's verdict left the plan as it was."""
        async with heartbeating():
            memory = request.memory
            verdict = await self._memory.consult(memory.cluster, memory.observation, memory.policy)
            if not told_together(verdict):
                return MemoryTrustResult(verdict=verdict)
            try:
                trust = await self._trust.note(request.trust.cluster, request.trust.event, request.trust.bar)
            except Exception:  # the memory answered: the workflow asks the record again on its own
                activity.logger.warning("track record not reached beside the node memory", exc_info=True)
                return MemoryTrustResult(verdict=verdict)
            return MemoryTrustResult(verdict=verdict, trust=trust)

    @activity.defn(name="attribute")
    async def attribute(self, request: AttributeInput) -> AttributeResult:
        job: JobInfo | None = None
        note = ""
        read_at = datetime.now(UTC)  # before the read: its age is never understated
        try:
            # A scheduler that hangs must fail this attempt with its own error (the command's or
            # request's timeout), which `goodput incident` shows, not with a heartbeat timeout.
            async with heartbeating():
                job = await mapped(self._scheduler.get_job(request.key.job_id))
        except ApplicationError as err:
            if err.type != UnknownJobError.__name__:
                raise
            note = f"scheduler does not know job {request.key.job_id}: {err.message}"
        # The launcher's own record of its restart cycles, for a job whose comment names it.
        launcher = await asyncio.to_thread(cycle_note, job) if job is not None else ""
        # Pushed lines not shown to be the job's own output never weigh in what is done; when
        # nothing else is left, they are weighed for a recommendation only.
        async with heartbeating():  # an lstat on a hung network filesystem is the filesystem's timeout, not ours
            owners = await asyncio.to_thread(file_owners, pushed_files(request.anomalies, job))
        evidence = sort_evidence(request.anomalies, job, owners)
        weighed = evidence.actionable or request.anomalies
        layout = await self._layout(request, job, weighed)
        attribution = attribute(weighed, job, layout=layout)
        if evidence.note:
            attribution = attribution.model_copy(update={"explanation": f"{attribution.explanation}; {evidence.note}"})
        return AttributeResult(attribution=attribution, job=job, note=note, launcher=launcher,
                               job_read_at=read_at if job is not None else None,
                               evidence_only="" if evidence.actionable else evidence.note,
                               set_aside=tuple(a.id for a, _ in evidence.evidence_only))

    async def _layout(self, request: AttributeInput, job: JobInfo | None,
                      anomalies: Sequence[Anomaly]) -> JobLayout | None:
        """Where the job's ranks ran (goodput's Slurm prolog), read only when evidence names a rank or
        GPU without a host; a layout is a hint, so failing to read one never fails attribution."""
        if self._layouts is None or job is None or not wants_layout(anomalies):
            return None
        try:
            return await asyncio.to_thread(self._layouts.job_layout, request.key.cluster, job.job_id,
                                           request.key.job_attempt)
        except (OSError, ValueError):
            activity.logger.warning("could not read the layout of job %s", job.job_id, exc_info=True)
            return None

    @activity.defn(name="find_checkpoint")
    async def find_checkpoint(self, request: CheckpointInput) -> CheckpointResult:
        """The latest valid checkpoint of the job, by the layout its comment names (stat-only),
        read with the job owner's permissions where possible; the explanation says how."""
        async with heartbeating():
            finding, explanation = await find_for_job(self._checkpoints, request.job, datetime.now(UTC))
        return CheckpointResult(checkpoint=finding.choice.checkpoint if finding else None, explanation=explanation)

    @activity.defn(name="isolate")
    async def isolate(self, request: IsolateInput) -> IsolateResult:
        drained: list[str] = []
        already: list[str] = []
        details: list[str] = []
        async with heartbeating(lambda: drained):
            reasons, faults = await self._drain_reasons(request)
            # Together, so that a backend that coalesces (the CLI's) sends one drain for all of
            # them; one failure still fails the activity, whose retry finds the others drained.
            results = await asyncio.gather(*(mapped(self._scheduler.drain_node(n, reasons[n]))
                                             for n in request.nodes))
            for node, result in zip(request.nodes, results, strict=True):
                (drained if result.changed else already).append(node)
                if result.changed:  # a retry finds it drained: counted by the attempt that drained it
                    self._metrics.accepted(AuditAction.DRAIN, request.observed_at)
                details.append(result.detail)
        return IsolateResult(drained=tuple(drained), already=tuple(already), details=tuple(details),
                             faults=faults)

    async def _drain_reasons(self, request: IsolateInput) -> tuple[dict[str, str], tuple[str, ...]]:
        """Each node's drain reason: its fault's where the topology groups it with others
        (goodput.recover.shared_fault: one reason, one command for the switch), else the incident's."""
        drains = await self._switch_map.shared_drains(self._policy.breaker, request.incident_id, request.nodes,
                                                      request.observed_at,
                                                      self._policy.node_incident.shared_drain_window_s)
        reasons: dict[str, str] = {}
        faults: dict[str, None] = {}
        for node in request.nodes:
            shared = drains[node]
            if shared is None:
                reasons[node] = drain_reason(request.incident_id, request.summary)
            else:
                reasons[node] = drain_reason(shared.fault_id, shared.reason_summary)
                faults[shared.fault_id] = None
        return reasons, tuple(faults)

    @activity.defn(name="resume")
    async def resume(self, request: ResumeInput) -> ResumeResult:
        async with heartbeating():
            if request.strategy is ResumeStrategy.RESUBMIT:
                return await resubmit(self._scheduler, self._metrics, request)
            return await requeue(self._scheduler, self._metrics, request)

    @activity.defn(name="verify")
    async def verify(self, request: VerifyInput) -> VerifyResult:
        """Poll until the resumed job runs; the deadline comes from policy, not from here."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.timeout_s
        # Waiting for healthy capacity is not a failure: the deadline stretches while Slurm says
        # the job waits for resources, up to the policy's capacity wait.
        capacity_deadline = deadline + request.capacity_wait_s
        last = "not polled yet"
        missing, missing_at = "", -1e9
        async with heartbeating(lambda: last):  # also while one poll waits on a slow scheduler
            while True:
                # the status alone (a storm's polls of one tick are one read), judged strictly
                job = await mapped(self._scheduler.job_status(request.job_id))
                restarted = not request.same_job or job.restart_count > request.restart_count_before
                last = f"job {job.job_id} is {job.state} (restarts={job.restart_count})"
                if job.state is JobState.PENDING and waiting_for_capacity(job.state_reason):
                    if job.state_reason == "BeginTime":  # Slurm's requeue delay: nodes free or not, it waits
                        missing = "not eligible to start yet"
                    elif loop.time() - missing_at >= CAPACITY_NOTE_EVERY_S:  # the node list costs 2 reads
                        missing, missing_at = await self._missing(request.job_id), loop.time()
                    last += f", waiting for capacity ({job.state_reason}: {missing})"
                    deadline = max(deadline, min(loop.time() + request.poll_interval_s * 2, capacity_deadline))
                if job.state is JobState.RUNNING and restarted:
                    running = f"{last} on {','.join(job.nodes) or '?'}"
                    if request.progress_past is None:
                        return VerifyResult(ok=True, detail=running, nodes=job.nodes)
                    full = await mapped(self._scheduler.get_job(request.job_id))  # its output paths
                    return (await self._progress(request, full, running)).model_copy(update={"nodes": job.nodes})
                if restarted and job.state not in (JobState.PENDING, JobState.REQUEUED, JobState.RUNNING,
                                                   JobState.COMPLETING):
                    return VerifyResult(ok=False, detail=f"resumed job ended: {last}")
                if loop.time() >= deadline:
                    return VerifyResult(ok=False, detail=f"not running within {request.timeout_s:.0f}s: {last}")
                await asyncio.sleep(next_poll_in(job, loop.time(), request.poll_interval_s, capacity_deadline))

    async def _missing(self, job_id: str) -> str:
        try:
            job = await self._scheduler.get_job(job_id)  # its partition, exclusions and size
            # the job's partition only: its cost must not grow with the cluster (issue #29)
            nodes = await self._scheduler.list_nodes(job.partition)
        except SchedulerError as err:
            return f"node list unavailable: {str(err)[:100]}"
        return capacity_note(nodes, job.excluded_nodes, len(job.nodes) or None)

    async def _progress(self, request: VerifyInput, job: JobInfo, running: str) -> VerifyResult:
        """Running is not recovered: wait for a step past the checkpoint in the new attempt's output."""
        target = request.progress_past
        paths = [p for p in (job.stdout_path, job.stderr_path) if p and "%" not in p]
        reader = ProgressReader(request.log_offsets, owner_uid=job.user_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.progress_timeout_s
        while True:
            highest = await asyncio.to_thread(reader.poll, paths)
            activity.heartbeat(highest)
            if highest is not None and target is not None and highest > target:
                return VerifyResult(ok=True, detail=f"{running}; progress at step {highest}, past checkpoint "
                                                    f"step {target}")
            if loop.time() >= deadline:
                seen = f"last step seen {highest}" if highest is not None else "no progress line seen"
                return VerifyResult(ok=False, detail=f"{running}, but no progress past step {target} within "
                                                     f"{request.progress_timeout_s:.0f}s ({seen})")
            await asyncio.sleep(request.poll_interval_s)

    @activity.defn(name="stop_job")
    async def stop_job(self, request: StopInput) -> str:
        # Successors first: once the job is cancelled an `afterany` one would start at once.
        async with heartbeating():
            chain = await hold_successors(self._scheduler, await mapped(self._scheduler.get_job(request.job_id)))
            result = await mapped(self._scheduler.cancel_job(request.job_id))
        if result.changed:
            self._metrics.accepted(AuditAction.STOP, request.observed_at)
        return result.detail + (f"; {chain}" if chain else "")

    @activity.defn(name="service_policy")
    async def service_policy(self, cluster: str) -> Policy:
        """The policy this worker's service runs incidents under, for one a reporter opened."""
        del cluster  # one policy per deployment today; the cluster is asked for so it can differ
        return self._policy

    @activity.defn(name="breaker_policy")
    async def breaker_policy(self, cluster: str) -> BreakerPolicy:
        """The breaker policy this worker's service runs under, with Slurm's switch map where the
        settings limit drains per switch and name no switches: a breaker takes it as it continues."""
        del cluster  # one policy per deployment today, as for service_policy
        async with heartbeating():
            return await self._switch_map.applied(self._policy.breaker)

    @activity.defn(name="consult_kill_switch")
    async def consult_kill_switch(self, cluster: str) -> KillSwitchState:
        async with heartbeating():
            return await self._kill_switch.read(cluster) if self._kill_switch else KillSwitchState()

    @activity.defn(name="consult_trust")
    async def consult_trust(self, request: TrustInput) -> RuleAutonomy:
        async with heartbeating():
            return await self._trust.note(request.cluster, request.event, request.bar)

    @activity.defn(name="audit")
    async def audit(self, request: AuditInput) -> None:
        self._metrics.audited(request.records)  # before the write: a trip happened even if the log fails
        await asyncio.to_thread(self.audit_log.append, request.records)

    @activity.defn(name="notify")
    async def notify(self, notification: Notification) -> None:
        self._metrics.notified(notification)  # before sending: a broken webhook closes incidents too
        async with heartbeating():  # a slow webhook must not time out into a second notification
            await self._notifier.notify(notification)

    def all(self) -> list[Callable[..., Awaitable[object]]]:
        return [self.attribute, self.reserve_drain, self.consult_node_memory, self.find_checkpoint, self.isolate,
                self.resume, self.verify, self.stop_job, self.notify, self.audit, self.consult_kill_switch,
                self.service_policy, self.breaker_policy, self.start_node_health, self.check_node, self.return_node,
                self.consult_trust, self.consult_memory_and_trust]
