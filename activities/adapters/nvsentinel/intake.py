"""NVSentinel's health events, received: triage, the scheduler's word on the node, anomalies to the sink.

Both transports (workers/nvsentinel/server.py: gRPC and CloudEvents over HTTP) hand their events to
one `NvSentinelIntake`. The rules are in `goodput.detect.nvsentinel`; this module orders the work
so that the common case stays free: an event that is healthy or recommends nothing is counted
and dropped from a few fields, before any model is built, any lock taken or any scheduler asked.
Only a fatal event reaches Slurm: the node it names must be one Slurm knows, and only the
opted-in jobs Slurm says are running there become incidents.

A delivery reports what became of it. A transient failure (the scheduler or Temporal unreachable)
stops it and asks the sender to retry: what was already submitted coalesces by anomaly id, and
what was handled is remembered (`DedupWindow`), so the retry costs nothing twice. An event that
can never be used (malformed, a node Slurm does not know) is rejected on its own; the rest of its
batch is handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TypeVar

from opentelemetry import metrics
from opentelemetry.metrics import Meter

from activities.adapters.nvsentinel.incoming import Incoming
from goodput.detect.nvsentinel import (
    DedupWindow,
    Disposition,
    HealthEvent,
    NodeEvidence,
    NvSentinelEventError,
    NvSentinelSettings,
    UnknownEventNodeError,
    dedup_key,
    event_anomalies,
    observed_at,
    running_on,
    slurm_node_candidates,
    summary,
)
from goodput.detect.watch import AnomalySink, OptInRule
from goodput.identifiers import validate_cluster
from goodput.scheduler import (
    JobInfo,
    JobState,
    NodeInfo,
    PermanentSchedulerError,
    Scheduler,
    UnknownJobError,
    UnknownNodeError,
)

log = logging.getLogger("goodput.nvsentinel")
SUBMIT_TIMEOUT_S = 30.0
SCHEDULER_TIMEOUT_S = 30.0
MAX_REJECTIONS = 20
T = TypeVar("T")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Outcome(StrEnum):
    IGNORED = "ignored"
    EVIDENCE = "evidence"
    DUPLICATE = "duplicate"
    INCIDENT = "incident"
    NO_JOB = "no-job"
    STALE = "stale"
    REJECTED = "rejected"
    RETRY = "retry"


@dataclass
class Received:
    """What one delivery came to."""

    outcomes: Counter[Outcome] = field(default_factory=Counter)
    anomalies: int = 0
    rejected: list[str] = field(default_factory=list)
    rejected_total: int = 0
    retry: str | None = None
    """Set when a transient failure stopped the delivery: the sender should send it again."""

    @property
    def outcome(self) -> Outcome:
        """The single outcome of a one-event delivery (the most significant of a batch's)."""
        for outcome in (Outcome.RETRY, Outcome.REJECTED, Outcome.INCIDENT, Outcome.NO_JOB, Outcome.STALE,
                        Outcome.EVIDENCE, Outcome.DUPLICATE):
            if self.outcomes[outcome]:
                return outcome
        return Outcome.IGNORED


class _Retry(Exception):
    """A transient failure: the delivery stops and the sender is asked to send it again."""


class NvSentinelIntake:
    """Turns delivered events into anomalies (fatal), node evidence (evidence-only) or nothing."""

    def __init__(self, settings: NvSentinelSettings, scheduler: Scheduler, sink: AnomalySink, cluster: str,
                 opt_in: OptInRule | None = None, *, clock: Callable[[], datetime] = _utcnow,
                 meter: Meter | None = None) -> None:
        self.settings = settings
        self.cluster = validate_cluster(cluster)
        self._scheduler = scheduler
        self._sink = sink
        self._opt_in = opt_in or OptInRule()
        self._clock = clock
        self.dedup = DedupWindow(settings.dedup_window_s, settings.dedup_max_keys)
        self.evidence = NodeEvidence(settings.evidence_per_node, settings.evidence_max_nodes)
        self._events = (meter or metrics.get_meter("goodput")).create_counter(
            "goodput.nvsentinel.events",
            description="NVSentinel health events received, by transport, recommended action and outcome")

    async def receive(self, items: Sequence[Incoming], transport: str) -> Received:
        received = Received()
        for item in items:
            try:
                outcome = await self._one(item, received)
            except NvSentinelEventError as err:
                outcome = Outcome.REJECTED
                received.rejected_total += 1
                if len(received.rejected) < MAX_REJECTIONS:
                    received.rejected.append(str(err))
                log.warning("NVSentinel event rejected: %s", err)
            except _Retry as err:
                received.retry = str(err)
                received.outcomes[Outcome.RETRY] += 1
                self._count(transport, item, Outcome.RETRY)
                break
            received.outcomes[outcome] += 1
            self._count(transport, item, outcome)
        return received

    def _count(self, transport: str, item: Incoming, outcome: Outcome) -> None:
        self._events.add(1, {"transport": transport, "action": item.action(), "outcome": outcome.value})

    async def _one(self, item: Incoming, received: Received) -> Outcome:
        quick = item.quick()
        if quick is not None and quick.disposition is Disposition.IGNORED:
            healthy = item.healthy_check()
            if healthy is not None:
                self.dedup.forget_check(*healthy)
            return Outcome.IGNORED
        event = item.parse()
        triaged = event.triage()
        if triaged.disposition is Disposition.IGNORED:
            if event.is_healthy:
                self.dedup.forget_check(event.node_name, event.check_name)
            return Outcome.IGNORED
        now = self._clock()
        key = dedup_key(event)
        if self.dedup.seen(key, now):
            return Outcome.DUPLICATE
        when = observed_at(event, now)
        if triaged.disposition is Disposition.EVIDENCE:
            self._remember(event, key, now, when)
            log.debug("NVSentinel evidence: %s (%s)", summary(event), triaged.why)
            return Outcome.EVIDENCE
        if now - when > timedelta(seconds=self.settings.max_event_age_s):
            self._remember(event, key, now, when)
            log.info("NVSentinel: a fatal event from %s is %s old; recorded, not pinned on the jobs running now: %s",
                     when.isoformat(), now - when, summary(event))
            return Outcome.STALE
        node, info = await self._known_node(event)
        jobs = running_on(node, await self._running_records(node), self._opt_in)
        earlier = self.evidence.recent(event.node_name, now - timedelta(seconds=self.settings.evidence_max_age_s))
        anomalies = []
        for job in jobs:
            try:
                anomalies += event_anomalies(event, node=node, cluster=self.cluster, jobs=[job], now=now,
                                             triaged=triaged, node_info=info, earlier=earlier)
            except ValueError as err:  # a job id the models refuse must not cost the other jobs theirs
                log.warning("NVSentinel: no anomaly for job %s on %s: %s", job.job_id, node, err)
        for anomaly in anomalies:
            try:
                async with asyncio.timeout(SUBMIT_TIMEOUT_S):
                    await self._sink.submit(anomaly)
            except Exception as err:
                log.warning("NVSentinel: could not submit anomaly %s for job %s; asking NVSentinel to retry",
                            anomaly.id, anomaly.job_id, exc_info=True)
                raise _Retry(f"could not record the anomaly for job {anomaly.job_id}; retry later") from err
            received.anomalies += 1
            log.info("NVSentinel: %s: anomaly %s for job %s attempt %d", summary(event), anomaly.id,
                     anomaly.job_id, anomaly.job_attempt)
        self._remember(event, key, now, when)
        if not anomalies:
            log.info("NVSentinel: no opted-in job running on %s for: %s", node, summary(event))
        return Outcome.INCIDENT if anomalies else Outcome.NO_JOB

    def _remember(self, event: HealthEvent, key: str, now: datetime, when: datetime) -> None:
        self.dedup.remember(key, event.node_name, event.check_name, now)
        self.evidence.record(event.node_name, when, f"{when.isoformat()} {summary(event)}")

    async def _known_node(self, event: HealthEvent) -> tuple[str, NodeInfo]:
        """The Slurm node the event names (mapped, or its short name): one Slurm knows, or a rejection."""
        candidates = slurm_node_candidates(event.node_name, self.settings.node_names)
        for name in candidates:
            try:
                return name, await self._scheduler_call(self._scheduler.get_node(name))
            except UnknownNodeError:
                continue
        raise UnknownEventNodeError(f"node {candidates[0]!r} (from nodeName {event.node_name[:100]!r}) is not a "
                                    "node Slurm knows; map it in nvsentinel.node_names if the names differ")

    async def _running_records(self, node: str) -> list[JobInfo]:
        """The records of the jobs running on `node`: its jobs' lines, then those jobs' records, not
        every job's record for each event (a switch's events come a node at a time; #29)."""
        records = []
        for line in await self._scheduler_call(self._scheduler.list_job_statuses(node)):
            if line.state is JobState.RUNNING and node in line.nodes:
                with contextlib.suppress(UnknownJobError):  # ended and forgotten since its line
                    records.append(await self._scheduler_call(self._scheduler.get_job(line.job_id)))
        return records

    async def _scheduler_call(self, call: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(SCHEDULER_TIMEOUT_S):
                return await call
        except PermanentSchedulerError:
            raise
        except Exception as err:
            log.warning("NVSentinel: the scheduler failed (%s: %s); asking NVSentinel to retry",
                        type(err).__name__, err)
            raise _Retry("the scheduler is unavailable; retry later") from err
