"""NVSentinel's health events, received: triage, the scheduler's word on the node, anomalies to the sink.

Both transports (workers/nvsentinel_server.py: gRPC and CloudEvents over HTTP) hand their events to
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

``VerdictPushBack` is the other direction: goodput's own verdicts (the nodes it drained, and why) sent
to NVSentinel's platform connector as STORE_ONLY events, which NVSentinel stores and never acts on.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import grpc
import httpx
from google.protobuf import empty_pb2
from opentelemetry import metrics
from opentelemetry.metrics import Meter

from activities.adapters.nvsentinel_proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import (
    ACTION_NUMBERS,
    BehaviourOverrides,
    DedupWindow,
    Disposition,
    HealthEvent,
    NodeEvidence,
    NvSentinelEventError,
    NvSentinelPushBack,
    NvSentinelSettings,
    RecommendedAction,
    TokenReviewSettings,
    Triage,
    UnknownEventNodeError,
    clean_text,
    dedup_key,
    event_anomalies,
    observed_at,
    parse_event,
    read_token_file,
    running_on,
    slurm_node_candidates,
    summary,
    triage,
    triage_json,
    verdict_event,
)
from goodput.detect.watch import AnomalySink, OptInRule
from goodput.identifiers import validate_cluster
from goodput.recover.audit import AuditAction, AuditLog, AuditRecord
from goodput.scheduler import NodeInfo, PermanentSchedulerError, Scheduler, UnknownNodeError

log = logging.getLogger("goodput.nvsentinel")
SUBMIT_TIMEOUT_S = 30.0
SCHEDULER_TIMEOUT_S = 30.0
MAX_REJECTIONS = 20
PLATFORM_CONNECTOR = "datamodels.PlatformConnector"
METHOD = "HealthEventOccurredV1"
LEGACY_METHOD = "HealthEventOccuredV1"  # older NVSentinel releases spell the rpc so
_ACTIONS_BY_NUMBER = {number: action for action, number in ACTION_NUMBERS.items()}
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


class Incoming(Protocol):
    """One event as a transport delivered it, read lazily."""

    def quick(self) -> Triage | None:
        """The triage when a few fields settle it (healthy, nothing recommended), else None."""
        ...

    def healthy_check(self) -> tuple[str, str] | None:
        """(node, check) of a healthy event, to forget that check's remembered faults."""
        ...

    def action(self) -> str:
        """The recommended action's name, for the metric (bounded: names or `invalid`)."""
        ...

    def parse(self) -> HealthEvent:
        """The whole event, validated; raises NvSentinelEventError."""
        ...


# -- the two transports' events -------------------------------------------------------------------


def _proto_overrides(message: pb.HealthEvent, name: str) -> BehaviourOverrides | None:
    if not message.HasField(name):
        return None
    value: pb.BehaviourOverrides = getattr(message, name)
    return BehaviourOverrides(force=value.force, skip=value.skip)


def event_from_proto(message: pb.HealthEvent) -> HealthEvent:
    """The model of a protobuf event; an impossible timestamp is a rejection, not a crash."""
    stamp: datetime | None = None
    if message.HasField("generatedTimestamp"):
        try:
            stamp = message.generatedTimestamp.ToDatetime(tzinfo=UTC)
        except (ValueError, OverflowError, OSError) as err:
            raise NvSentinelEventError(f"invalid generatedTimestamp: {err}") from None
    data: dict[str, Any] = {
        "version": message.version, "agent": message.agent, "component_class": message.componentClass,
        "check_name": message.checkName, "is_fatal": message.isFatal, "is_healthy": message.isHealthy,
        "message": message.message, "recommended_action": int(message.recommendedAction),
        "error_code": list(message.errorCode[:64]),
        "entities_impacted": [{"entity_type": e.entityType, "entity_value": e.entityValue}
                              for e in message.entitiesImpacted[:64]],
        "generated_timestamp": stamp, "node_name": message.nodeName,
        "quarantine_overrides": _proto_overrides(message, "quarantineOverrides"),
        "drain_overrides": _proto_overrides(message, "drainOverrides"),
        "processing_strategy": int(message.processingStrategy),
    }
    return parse_event(data)


def event_to_proto(event: HealthEvent) -> pb.HealthEvent:
    message = pb.HealthEvent(
        version=event.version, agent=event.agent, componentClass=event.component_class, checkName=event.check_name,
        isFatal=event.is_fatal, isHealthy=event.is_healthy, message=event.message,
        recommendedAction=event.recommended_action.number,  # type: ignore[arg-type]  # the enum is an int
        errorCode=list(event.error_code), nodeName=event.node_name,
        processingStrategy=event.processing_strategy.number)  # type: ignore[arg-type]
    message.entitiesImpacted.extend(pb.Entity(entityType=e.entity_type, entityValue=e.entity_value)
                                    for e in event.entities_impacted)
    if event.generated_timestamp is not None:
        message.generatedTimestamp.FromDatetime(event.generated_timestamp)
    for name, overrides in (("quarantineOverrides", event.quarantine_overrides),
                            ("drainOverrides", event.drain_overrides)):
        if overrides is not None:
            getattr(message, name).CopyFrom(pb.BehaviourOverrides(force=overrides.force, skip=overrides.skip))
    return message


class ProtoIncoming:
    """An event from the gRPC sink: triaged from the message's fields, converted only when worth it."""

    __slots__ = ("_message",)

    def __init__(self, message: pb.HealthEvent) -> None:
        self._message = message

    def quick(self) -> Triage | None:
        m = self._message
        if m.isHealthy:
            return triage(is_fatal=m.isFatal, is_healthy=True, action=RecommendedAction.NONE)
        quarantine = m.quarantineOverrides if m.HasField("quarantineOverrides") else None
        if not m.isFatal and m.recommendedAction == 0 and (quarantine is None or not quarantine.force):
            return triage(is_fatal=False, is_healthy=False, action=RecommendedAction.NONE)
        return None

    def healthy_check(self) -> tuple[str, str] | None:
        m = self._message
        return (clean_text(m.nodeName, 256), clean_text(m.checkName, 256)) if m.isHealthy else None

    def action(self) -> str:
        return _ACTIONS_BY_NUMBER.get(int(self._message.recommendedAction), RecommendedAction.UNKNOWN).value

    def parse(self) -> HealthEvent:
        return event_from_proto(self._message)


class JsonIncoming:
    """An event from a CloudEvent's `data.healthEvent` (protobuf JSON)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def quick(self) -> Triage | None:
        return triage_json(self._data)

    def healthy_check(self) -> tuple[str, str] | None:
        if self._data.get("isHealthy") is not True:
            return None
        node, check = self._data.get("nodeName"), self._data.get("checkName")
        if not isinstance(node, str) or not isinstance(check, str | None):
            return None
        return clean_text(node, 256), clean_text(check or "", 256)

    def action(self) -> str:
        try:
            return RecommendedAction.from_wire(self._data.get("recommendedAction")).value
        except ValueError:
            return "invalid"

    def parse(self) -> HealthEvent:
        return parse_event(self._data)


# -- the intake --------------------------------------------------------------------------------------


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
        jobs = running_on(node, await self._scheduler_call(self._scheduler.list_jobs()), self._opt_in)
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


# -- Kubernetes TokenReview: NVSentinel's projected ServiceAccount tokens ---------------------------


class TokenReviewer:
    """Asks the Kubernetes API server whether a bearer token is a valid ServiceAccount token of an
    allowed user (`authentication.k8s.io/v1` TokenReview), as NVSentinel expects of a grpc sink.

    `check` answers True (valid, allowed), False (invalid, or another user) or None (the API server
    could not be asked: the caller should retry later). Answers are cached per token digest for
    `cache_s` (at most `MAX_CACHED` tokens), so a connector sending one event after another costs
    one review a minute. The client reads no proxy or certificate variables from the environment.
    """

    MAX_CACHED = 1024

    def __init__(self, settings: TokenReviewSettings, *, transport: httpx.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        verify: ssl.SSLContext | bool = True
        if settings.ca_file is not None:
            verify = ssl.create_default_context(cafile=str(settings.ca_file.expanduser()))
        self._client = httpx.AsyncClient(base_url=settings.api_url.rstrip("/"), verify=verify, trust_env=False,
                                         timeout=settings.timeout_s, transport=transport)
        self._cache: OrderedDict[str, tuple[bool, float]] = OrderedDict()
        self.reviews = 0

    async def aclose(self) -> None:
        await self._client.aclose()

    async def check(self, token: str) -> bool | None:
        if not token or len(token) > 16_384:
            return False
        key = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        verdict = await self._review(token)
        if verdict is not None:
            self._cache.pop(key, None)
            self._cache[key] = (verdict, now + self._settings.cache_s)
            while len(self._cache) > self.MAX_CACHED:
                self._cache.popitem(last=False)
        return verdict

    async def _review(self, token: str) -> bool | None:
        settings = self._settings
        body: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                "spec": {"token": token}}
        if settings.audiences:
            body["spec"]["audiences"] = list(settings.audiences)
        self.reviews += 1
        try:
            own = settings.token_file.expanduser().read_text(encoding="utf-8").strip()
            response = await self._client.post("/apis/authentication.k8s.io/v1/tokenreviews", json=body,
                                               headers={"Authorization": f"Bearer {own}"})
            if response.status_code not in (200, 201):
                log.warning("NVSentinel: TokenReview answered HTTP %d; refusing for now", response.status_code)
                return None
            status = response.json().get("status") or {}
        except (OSError, httpx.HTTPError, ValueError) as err:
            log.warning("NVSentinel: TokenReview failed (%s: %s); refusing for now", type(err).__name__, err)
            return None
        user = (status.get("user") or {}).get("username") if isinstance(status, dict) else None
        if not (isinstance(status, dict) and status.get("authenticated") is True and user in settings.allowed_users):
            log.warning("NVSentinel: a gRPC call's token was refused by TokenReview (user %r)", user)
            return False
        return not settings.audiences or bool(set(status.get("audiences") or ()) & set(settings.audiences))


# -- push-back: goodput's verdicts, to NVSentinel ---------------------------------------------------


class VerdictPushBack:
    """An `AuditLog` that also tells NVSentinel, as STORE_ONLY events, which nodes goodput drained and why.

    It wraps the real log (which keeps every record) and, after each append, sends one event per node
    of each drain record to NVSentinel's platform connector (`unix:///var/run/nvsentinel.sock` or
    `host:port`) over gRPC: NVSentinel stores and shows them beside its own events and, by its rules
    for STORE_ONLY, never cordons, drains or remediates for them. The audit activity calls `append`
    in a worker thread, so the blocking call (bounded by `timeout_s`) holds up no event loop. A
    failure is logged and never fails the audit: the push-back is information, not an action. A
    retried activity may send the same verdict twice; NVSentinel's dedup key makes it one.
    """

    def __init__(self, inner: AuditLog, settings: NvSentinelPushBack, *, node_names: Mapping[str, str] | None = None,
                 clock: Callable[[], datetime] = _utcnow) -> None:
        self._inner = inner
        self._settings = settings
        self._token = read_token_file(settings.token_file) if settings.token_file is not None else None
        # goodput drains Slurm names; NVSentinel knows the Kubernetes ones
        self._k8s_names = {slurm: k8s for k8s, slurm in (node_names or {}).items()}
        self._clock = clock
        self._channel = grpc.insecure_channel(settings.target)
        self._call = self._channel.unary_unary(f"/{PLATFORM_CONNECTOR}/{METHOD}",
                                               request_serializer=pb.HealthEvents.SerializeToString,
                                               response_deserializer=empty_pb2.Empty.FromString)
        self.sent = 0
        self.failures = 0

    def append(self, records: Sequence[AuditRecord]) -> None:
        self._inner.append(records)
        events = [verdict_event(node=self._k8s_names.get(node, node), incident_id=record.incident_id,
                                explanation=f"{record.reason} ({record.result})" if record.result else record.reason,
                                agent=self._settings.agent, now=self._clock())
                  for record in records if record.action is AuditAction.DRAIN for node in record.nodes]
        if not events:
            return
        metadata = (("authorization", f"Bearer {self._token}"),) if self._token else None
        try:
            self._call(pb.HealthEvents(version=1, events=[event_to_proto(e) for e in events]),
                       timeout=self._settings.timeout_s, metadata=metadata)
        except Exception as err:  # any failure to reach NVSentinel: logged, never the audit's failure
            self.failures += 1
            log.warning("could not send %d verdicts to NVSentinel at %s: %s", len(events), self._settings.target,
                        err.code() if isinstance(err, grpc.RpcError) else err)
            return
        self.sent += len(events)

    def read(self) -> list[AuditRecord]:
        return self._inner.read()

    def close(self) -> None:
        self._channel.close()


__all__ = [
    "LEGACY_METHOD",
    "METHOD",
    "PLATFORM_CONNECTOR",
    "Incoming",
    "JsonIncoming",
    "NvSentinelIntake",
    "Outcome",
    "ProtoIncoming",
    "Received",
    "VerdictPushBack",
    "event_from_proto",
    "event_to_proto",
]
