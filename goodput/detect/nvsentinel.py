"""NVSentinel's health events: what each one means for the jobs running on its node.

NVSentinel (NVIDIA's GPU-fleet health monitor for Kubernetes) raises a `HealthEvent` whenever one
of its monitors sees something on a node: an Xid in the kernel log, a DCGM health check, a cloud
provider's maintenance notice. goodput receives those events over gRPC (NVSentinel's platform
connector interface) or as CloudEvents over HTTP; both transports end here, in one model and one
set of rules, pure and tested:

- `triage` sorts an event into *ignored* (healthy again, or nothing recommended: on a real fleet
  about 99% of events, so deciding that reads a handful of fields and nothing else), *evidence*
  (remembered against the node, never acted on: `STORE_ONLY` events, advice without a fatal
  verdict, events NVSentinel was told not to drain for) or *fatal* (the jobs running on the node
  become incidents).
- `event_anomalies` turns a fatal event into one anomaly per opted-in job attempt running on the
  node, with the node and the GPUs it names as culprits and the event's fields as evidence.
- `DedupWindow` remembers the events already handled under NVSentinel's own duplicate key, so
  an at-least-once redelivery costs no scheduler call and opens nothing twice; `NodeEvidence`
  keeps the last evidence-only events per node to show beside a later fatal one.

Events come from the network: every string and list is bounded, node names are checked before
any scheduler sees them, and an event can only reach jobs Slurm says are running on a node Slurm
knows. Nothing here does I/O or reads a clock; the adapter (activities.adapters.nvsentinel) asks
the scheduler and submits the anomalies.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import math
import re
import urllib.parse
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from goodput.detect.gpu import normalize_pci_bus_id
from goodput.detect.watch import OptInRule
from goodput.identifiers import InvalidIdentifierError, validate_node_name
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category
from goodput.ownership import is_goodput_reason
from goodput.scheduler import JobInfo, JobState, NodeInfo

MAX_TEXT = 4096
MAX_NAME_CHARS = 256
MAX_LIST = 32
MAX_EARLIER_LINES = 5
MIN_TOKEN_CHARS = 16
MAX_JSON_INT_CHARS = 40
MAX_JSON_DEPTH = 32


class NvSentinelEventError(ValueError):
    """An event that cannot be used: malformed, or naming a node that no scheduler call may carry."""


class UnknownEventNodeError(NvSentinelEventError):
    """The event names a node Slurm does not know: nothing is done for it."""


class CloudEventError(ValueError):
    """A CloudEvents body that is not a usable NVSentinel health event (HTTP 400)."""


# -- the wire vocabulary (names and numbers are NVSentinel's) -----------------------------------


class RecommendedAction(StrEnum):
    NONE = "NONE"
    COMPONENT_RESET = "COMPONENT_RESET"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    RUN_FIELDDIAG = "RUN_FIELDDIAG"
    RESTART_VM = "RESTART_VM"
    RESTART_BM = "RESTART_BM"
    REPLACE_VM = "REPLACE_VM"
    RUN_DCGMEUD = "RUN_DCGMEUD"
    RESTART_APP = "RESTART_APP"
    UNKNOWN = "UNKNOWN"

    @property
    def number(self) -> int:
        return ACTION_NUMBERS[self]

    @classmethod
    def from_wire(cls, value: object) -> RecommendedAction:
        """A name (protobuf JSON), a number (binary, or JSON written with numbers) or nothing (the
        proto3 default). A value this release does not know (a newer NVSentinel) is UNKNOWN, an
        action all the same, never NONE."""
        if value is None:
            return cls.NONE
        if isinstance(value, bool):
            raise ValueError("recommendedAction must be a name or a number")
        if isinstance(value, int):
            return _ACTION_BY_NUMBER.get(value, cls.UNKNOWN)
        if isinstance(value, str):
            try:
                return cls(value.strip().upper())
            except ValueError:
                return cls.UNKNOWN
        raise ValueError("recommendedAction must be a name or a number")


ACTION_NUMBERS: dict[RecommendedAction, int] = {
    RecommendedAction.NONE: 0, RecommendedAction.COMPONENT_RESET: 2, RecommendedAction.CONTACT_SUPPORT: 5,
    RecommendedAction.RUN_FIELDDIAG: 6, RecommendedAction.RESTART_VM: 15, RecommendedAction.RESTART_BM: 24,
    RecommendedAction.REPLACE_VM: 25, RecommendedAction.RUN_DCGMEUD: 26, RecommendedAction.RESTART_APP: 39,
    RecommendedAction.UNKNOWN: 99,
}
_ACTION_BY_NUMBER = {number: action for action, number in ACTION_NUMBERS.items()}


class ProcessingStrategy(StrEnum):
    UNSPECIFIED = "UNSPECIFIED"  # treated as EXECUTE_REMEDIATION
    EXECUTE_REMEDIATION = "EXECUTE_REMEDIATION"
    STORE_ONLY = "STORE_ONLY"

    @property
    def number(self) -> int:
        return _STRATEGY_NUMBERS[self]

    @classmethod
    def from_wire(cls, value: object) -> ProcessingStrategy:
        if value is None:
            return cls.UNSPECIFIED
        if isinstance(value, bool):
            raise ValueError("processingStrategy must be a name or a number")
        if isinstance(value, int):
            return _STRATEGY_BY_NUMBER.get(value, cls.UNSPECIFIED)
        if isinstance(value, str):
            try:
                return cls(value.strip().upper())
            except ValueError:
                raise ValueError(f"unknown processingStrategy {value[:40]!r}") from None
        raise ValueError("processingStrategy must be a name or a number")


_STRATEGY_NUMBERS = {ProcessingStrategy.UNSPECIFIED: 0, ProcessingStrategy.EXECUTE_REMEDIATION: 1,
                     ProcessingStrategy.STORE_ONLY: 2}
_STRATEGY_BY_NUMBER = {number: strategy for strategy, number in _STRATEGY_NUMBERS.items()}


def clean_text(value: object, limit: int = MAX_TEXT) -> str:
    """One line of printable text, at most `limit` characters: control characters (newlines
    included) become spaces, so an event cannot forge extra evidence or log lines."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    text = value[: limit * 2]
    text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return text if len(text) <= limit else text[:limit] + "…[truncated]"


def _name(value: object) -> str:
    return clean_text(value, MAX_NAME_CHARS)


def _bounded_list(value: object) -> object:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(value[:MAX_LIST])
    return value


Text = Annotated[str, BeforeValidator(clean_text)]
Name = Annotated[str, BeforeValidator(_name)]


class _Wire(BaseModel):
    """NVSentinel's camelCase field names (protobuf JSON) on the wire, snake_case in Python."""

    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)


class Entity(_Wire):
    entity_type: Name = ""
    entity_value: Name = ""


class BehaviourOverrides(_Wire):
    force: StrictBool = False
    skip: StrictBool = False


class HealthEvent(_Wire):
    """One NVSentinel health event, from either transport, bounded and cleaned."""

    version: int = Field(default=0, ge=0, le=2**32 - 1)
    agent: Name = ""
    component_class: Name = ""
    check_name: Name = ""
    is_fatal: StrictBool = False
    is_healthy: StrictBool = False
    message: Text = ""
    recommended_action: Annotated[RecommendedAction, BeforeValidator(RecommendedAction.from_wire)] = (
        RecommendedAction.NONE)
    error_code: Annotated[tuple[Name, ...], BeforeValidator(_bounded_list)] = ()
    entities_impacted: Annotated[tuple[Entity, ...], BeforeValidator(_bounded_list)] = ()
    generated_timestamp: datetime | None = None
    node_name: Name = ""
    quarantine_overrides: BehaviourOverrides | None = None
    drain_overrides: BehaviourOverrides | None = None
    processing_strategy: Annotated[ProcessingStrategy, BeforeValidator(ProcessingStrategy.from_wire)] = (
        ProcessingStrategy.UNSPECIFIED)

    @field_validator("generated_timestamp")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @property
    def store_only(self) -> bool:
        return self.processing_strategy is ProcessingStrategy.STORE_ONLY

    def triage(self) -> Triage:
        return triage(is_fatal=self.is_fatal, is_healthy=self.is_healthy, action=self.recommended_action,
                      strategy=self.processing_strategy,
                      quarantine=self.quarantine_overrides or _NO_OVERRIDES,
                      drain=self.drain_overrides or _NO_OVERRIDES)


_NO_OVERRIDES = BehaviourOverrides()


def parse_event(data: object) -> HealthEvent:
    """A `HealthEvent` from its protobuf-JSON form (camelCase keys, enums as names or numbers)."""
    if not isinstance(data, Mapping):
        raise NvSentinelEventError(f"a health event must be a JSON object, got {_json_type(data)}")
    try:
        return HealthEvent.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "event"
        raise NvSentinelEventError(f"invalid health event: {where}: {first.get('msg', 'invalid')}") from None


def _json_type(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


# -- triage: the cheap decision -------------------------------------------------------------------


class Disposition(StrEnum):
    IGNORED = "ignored"    # healthy again, or nothing recommended and not fatal
    EVIDENCE = "evidence"  # remembered against the node; no incident, no scheduler action
    FATAL = "fatal"        # the jobs running on the node become incidents


@dataclass(frozen=True, slots=True)
class Triage:
    disposition: Disposition
    why: str
    blame_node: bool = True
    """False: the node is not a culprit (RESTART_APP, or NVSentinel was told not to quarantine it), so
    the incident restarts the job but drains nothing."""


_IGNORED_HEALTHY = Triage(Disposition.IGNORED, "healthy: the condition cleared")
_IGNORED_NONE = Triage(Disposition.IGNORED, "not fatal and nothing recommended")
_STORE_ONLY = Triage(Disposition.EVIDENCE, "STORE_ONLY: recorded, never acted on")
_DRAIN_SKIPPED = Triage(Disposition.EVIDENCE, "fatal, but drainOverrides.skip: NVSentinel leaves the "
                                              "workloads running, so goodput does too")
_ADVICE = Triage(Disposition.EVIDENCE, "not fatal: the recommended action is recorded, not acted on")


def triage(*, is_fatal: bool, is_healthy: bool, action: RecommendedAction,
           strategy: ProcessingStrategy = ProcessingStrategy.UNSPECIFIED,
           quarantine: BehaviourOverrides = _NO_OVERRIDES, drain: BehaviourOverrides = _NO_OVERRIDES) -> Triage:
    """What an event is worth, from six fields alone (no allocation on the common paths).

    Healthy wins over everything; STORE_ONLY is never acted on; a fatal verdict (or a forced
    quarantine) makes the node's jobs incidents unless NVSentinel itself was told not to drain the
    node's workloads; a non-fatal event with an action is advice, recorded only; NONE is ignored.
    """
    if is_healthy:
        return _IGNORED_HEALTHY
    if not (is_fatal or quarantine.force) and action is RecommendedAction.NONE:
        return _IGNORED_NONE
    if strategy is ProcessingStrategy.STORE_ONLY:
        return _STORE_ONLY
    if is_fatal or quarantine.force:
        if drain.skip:
            return _DRAIN_SKIPPED
        if action is RecommendedAction.RESTART_APP:
            return Triage(Disposition.FATAL, "fatal, RESTART_APP: the job is restarted, the node not blamed",
                          blame_node=False)
        if quarantine.skip:
            return Triage(Disposition.FATAL, "fatal, but quarantineOverrides.skip: the job is restarted, the "
                                             "node not drained", blame_node=False)
        return Triage(Disposition.FATAL, "fatal" if is_fatal else "quarantineOverrides.force")
    return _ADVICE


def _overrides_json(value: object) -> BehaviourOverrides:
    if isinstance(value, Mapping):
        force, skip = value.get("force"), value.get("skip")
        if force is True or skip is True:
            return BehaviourOverrides(force=force is True, skip=skip is True)
    return _NO_OVERRIDES


def triage_json(data: Mapping[str, Any]) -> Triage | None:
    """The triage of a protobuf-JSON event read without building the model, when that is safe:
    None means "parse it fully" (it may be worth something, or be malformed)."""
    if data.get("isHealthy") is True:
        return _IGNORED_HEALTHY
    fatal = data.get("isFatal", False)
    action = data.get("recommendedAction")
    if fatal is False and action in (None, "NONE", 0) and data.get("processingStrategy") in (
            None, "UNSPECIFIED", "EXECUTE_REMEDIATION", "STORE_ONLY", 0, 1, 2):
        quarantine = _overrides_json(data.get("quarantineOverrides"))
        if not quarantine.force:
            return _IGNORED_NONE
    return None


# -- deduplication and per-node evidence ---------------------------------------------------------


def dedup_key(event: HealthEvent) -> str:
    """NVSentinel's own duplicate key: node, check, entities, error codes, strategy, healthy.

    Lists are sorted, so a redelivery that lists the same entities in another order is the same
    event. The generated timestamp is not part of it: a monitor re-reporting a standing condition
    is the same condition.
    """
    entities = sorted(f"{e.entity_type}={e.entity_value}" for e in event.entities_impacted)
    parts = [event.node_name, event.check_name, "\x1f".join(entities), "\x1f".join(sorted(event.error_code)),
             event.processing_strategy.value, str(event.is_healthy)]
    return hashlib.sha256("\x1e".join(parts).encode("utf-8", "replace")).hexdigest()[:32]


class DedupWindow:
    """Event keys handled in the last `window_s`, at most `max_keys` of them (oldest forgotten first).

    A healthy event for a (node, check) forgets what was remembered for it: after the condition
    cleared, the same fault again is a new fault. All operations are O(1) amortised.
    """

    def __init__(self, window_s: float, max_keys: int) -> None:
        self._window = timedelta(seconds=window_s)
        self._max = max_keys
        self._expiry: OrderedDict[str, datetime] = OrderedDict()
        self._by_check: dict[tuple[str, str], set[str]] = {}
        self._check_of: dict[str, tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self._expiry)

    def seen(self, key: str, now: datetime) -> bool:
        self._expire(now)
        return key in self._expiry

    def remember(self, key: str, node: str, check: str, now: datetime) -> None:
        self._drop(key)
        self._expiry[key] = now + self._window
        self._by_check.setdefault((node, check), set()).add(key)
        self._check_of[key] = (node, check)
        while len(self._expiry) > self._max:
            self._drop(next(iter(self._expiry)))

    def forget_check(self, node: str, check: str) -> int:
        keys = self._by_check.pop((node, check), set())
        for key in keys:
            self._expiry.pop(key, None)
            self._check_of.pop(key, None)
        return len(keys)

    def _expire(self, now: datetime) -> None:
        while self._expiry:
            key, expires = next(iter(self._expiry.items()))
            if expires > now:
                return
            self._drop(key)

    def _drop(self, key: str) -> None:
        if self._expiry.pop(key, None) is None:
            return
        check = self._check_of.pop(key, None)
        if check is not None:
            keys = self._by_check.get(check)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_check[check]


class NodeEvidence:
    """The last few evidence-only events per node (bounded in nodes and lines), as one-line summaries."""

    def __init__(self, per_node: int, max_nodes: int) -> None:
        self._per_node = per_node
        self._max_nodes = max_nodes
        self._lines: OrderedDict[str, deque[tuple[datetime, str]]] = OrderedDict()

    def record(self, node: str, at: datetime, line: str) -> None:
        if self._per_node <= 0:
            return
        lines = self._lines.pop(node, None) or deque(maxlen=self._per_node)
        lines.append((at, line))
        self._lines[node] = lines
        while len(self._lines) > self._max_nodes:
            self._lines.popitem(last=False)

    def recent(self, node: str, since: datetime) -> list[str]:
        return [line for at, line in self._lines.get(node, ()) if at >= since]

    def nodes(self) -> int:
        return len(self._lines)


# -- from a fatal event to anomalies -------------------------------------------------------------


def kind_and_category(component_class: str) -> tuple[AnomalyKind, Category]:
    """GPU components are GPU hardware, the GPU fabric is NVLink, NICs are the network, the rest the node."""
    text = component_class.lower()
    if "nvswitch" in text or "nvlink" in text:
        return AnomalyKind.GPU_FAULT, Category.NVLINK
    if "gpu" in text:
        return AnomalyKind.GPU_FAULT, Category.GPU_HARDWARE
    if text in {"nic", "hca", "ib", "infiniband", "network", "ethernet"}:
        return AnomalyKind.NODE_FAILURE, Category.NETWORK
    return AnomalyKind.NODE_FAILURE, Category.NODE_FAILURE


_GPU_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f\-]{1,100}$")
_PCI_ID = re.compile(r"^[0-9A-Fa-f:.]{1,40}$")


def impacted_gpus(event: HealthEvent, node: str) -> tuple[str, ...]:
    """The GPUs an event names, as goodput's other GPU evidence names them: the UUID when given,
    else the PCI bus id (normalised), else `node:gpuN` for a bare index; at most `MAX_LIST`."""
    uuids: list[str] = []
    pcis: list[str] = []
    indices: list[str] = []
    for entity in event.entities_impacted:
        kind, value = entity.entity_type.upper(), entity.entity_value.strip()
        if len(value) > 128:
            continue
        if _GPU_UUID.match(value) and kind in {"GPU_UUID", "UUID", "GPU"}:
            uuids.append(value)
        elif kind in {"PCI", "PCI_BUS_ID", "GPU_PCI", "PCIBUSID"} and _PCI_ID.match(value):
            pcis.append(normalize_pci_bus_id(value))
        elif kind in {"GPU", "GPU_ID", "GPU_INDEX"} and value.isdigit() and len(value) <= 4:
            indices.append(f"{node}:gpu{int(value)}")
    chosen = uuids or pcis or indices
    return tuple(dict.fromkeys(chosen))[:MAX_LIST]


def _xid_signatures(event: HealthEvent) -> tuple[str, ...]:
    """`xid-N` for the Xid numbers an Xid check reports, so the catalogue's explanation applies."""
    if "xid" not in event.check_name.lower():
        return ()
    ids = []
    for code in event.error_code:
        digits = code.strip().lower().removeprefix("xid").strip(" _-:")
        if digits.isdigit() and len(digits) <= 4:
            ids.append(f"xid-{int(digits)}")
    return tuple(dict.fromkeys(ids))


def summary(event: HealthEvent) -> str:
    """One line: who saw what, and what NVSentinel recommends."""
    verdict = "fatal" if event.is_fatal else ("healthy" if event.is_healthy else "not fatal")
    who = f"NVSentinel {event.agent or 'monitor'}"
    what = event.check_name or "health check"
    component = f" ({event.component_class})" if event.component_class else ""
    codes = f" [{', '.join(event.error_code)}]" if event.error_code else ""
    strategy = ", STORE_ONLY" if event.store_only else ""
    return (f"{who}: {what}{component} on {event.node_name}{codes}: {verdict}, recommended action "
            f"{event.recommended_action.value}{strategy}")


def evidence_lines(event: HealthEvent, *, triaged: Triage, node_info: NodeInfo | None = None,
                   earlier: Sequence[str] = ()) -> list[str]:
    lines = [summary(event)]
    if event.message:
        lines.append(f"message: {event.message}")
    if event.entities_impacted:
        lines.append("entities: " + ", ".join(f"{e.entity_type}={e.entity_value}" for e in event.entities_impacted))
    if event.generated_timestamp is not None:
        lines.append(f"generated at {event.generated_timestamp.isoformat()}")
    lines.append(f"goodput: {triaged.why}")
    if node_info is not None and (node_info.drained or node_info.reason) and not is_goodput_reason(node_info.reason):
        by = node_info.reason_user or "someone else"
        lines.append(f"Slurm: {node_info.name} is already {node_info.state.lower()}"
                     f"{'+drain' if node_info.drained else ''} by {by} ({clean_text(node_info.reason, 200)}): "
                     "not goodput's drain, so goodput leaves it as it is")
    lines += [f"earlier on {event.node_name}: {line}" for line in earlier[-MAX_EARLIER_LINES:]]
    return lines


def observed_at(event: HealthEvent, now: datetime) -> datetime:
    """When it happened: the event's own time, but never in the future (a skewed clock)."""
    when = event.generated_timestamp
    return now if when is None or when > now else when


def running_on(node: str, jobs: Iterable[JobInfo], opt_in: OptInRule) -> list[JobInfo]:
    """The opted-in job attempts Slurm says are running on `node`: the only jobs an event may reach."""
    return [j for j in jobs if j.state is JobState.RUNNING and node in j.nodes and opt_in.admits(j)]


def anomaly_id(event: HealthEvent, *, cluster: str, job: JobInfo, node: str) -> str:
    """Stable for the same fault on the same job attempt, so a redelivery coalesces in the incident."""
    entities = sorted(f"{e.entity_type}={e.entity_value}" for e in event.entities_impacted)
    key = "\0".join([cluster, job.job_id, str(job.restart_count), node, event.check_name,
                     "\x1f".join(entities), "\x1f".join(sorted(event.error_code))])
    return f"nvsentinel:{hashlib.sha256(key.encode('utf-8', 'replace')).hexdigest()[:20]}"


def event_anomalies(event: HealthEvent, *, node: str, cluster: str, jobs: Sequence[JobInfo], now: datetime,
                    triaged: Triage | None = None, node_info: NodeInfo | None = None,
                    earlier: Sequence[str] = ()) -> list[Anomaly]:
    """One anomaly per job in `jobs` (the caller passes `running_on(node, ...)`): the node and the
    GPUs the event names are the culprits, unless the triage says the node is not to blame."""
    triaged = triaged or event.triage()
    if triaged.disposition is not Disposition.FATAL:
        return []
    kind, category = kind_and_category(event.component_class)
    evidence = evidence_lines(event, triaged=triaged, node_info=node_info, earlier=earlier)
    when = observed_at(event, now)
    return [Anomaly(id=anomaly_id(event, cluster=cluster, job=job, node=node), source=AnomalySource.GPU,
                    kind=kind, cluster=cluster, job_id=job.job_id, job_attempt=job.restart_count,
                    nodes=(node,) if triaged.blame_node else (), gpus=impacted_gpus(event, node),
                    evidence=evidence, category=category, signature_ids=_xid_signatures(event),
                    observed_at=when, detected_at=now)
            for job in jobs]


def slurm_node_candidates(event_node: str, node_names: Mapping[str, str]) -> list[str]:
    """The Slurm node names to try for an event's Kubernetes node name, each one checked.

    An explicit mapping wins; otherwise the name itself, then its short form (the part before the
    first dot: Kubernetes often names nodes by FQDN where Slurm uses the short hostname).
    """
    if not event_node:
        raise NvSentinelEventError("the event names no node (nodeName is empty)")
    mapped = node_names.get(event_node)
    raw = [mapped] if mapped else [event_node, event_node.split(".", 1)[0]]
    names: list[str] = []
    first_error: InvalidIdentifierError | None = None
    for name in dict.fromkeys(raw):
        try:
            names.append(validate_node_name(name))
        except InvalidIdentifierError as err:
            first_error = first_error or err
    if not names:
        raise NvSentinelEventError(f"the event's node: {first_error}")
    return names


# -- CloudEvents (HTTP) -------------------------------------------------------------------------


CLOUDEVENTS_TYPE = "application/cloudevents+json"


@dataclass(frozen=True, slots=True)
class CloudEvent:
    id: str
    source: str
    type: str
    event: Mapping[str, Any]
    """`data.healthEvent`, still as JSON: triaged before it is validated."""


def _bounded_int(text: str) -> int:
    if len(text) > MAX_JSON_INT_CHARS:
        raise ValueError(f"a number of {len(text)} digits")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number too large")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: object, limit: int) -> bool:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return True


def parse_cloudevent(body: bytes) -> CloudEvent:
    """A structured-mode CloudEvents 1.0 body (one event) carrying `data.healthEvent`."""
    try:
        text = body.decode("utf-8")
        document = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float,
                              parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise CloudEventError("the body is not UTF-8") from None
    except RecursionError:
        raise CloudEventError("the body is nested too deeply") from None
    except ValueError as err:
        raise CloudEventError(f"the body is not JSON: {str(err)[:200]}") from None
    if not isinstance(document, dict):
        raise CloudEventError(f"a structured CloudEvent is a JSON object, got {_json_type(document)} "
                              "(batched mode is not supported)")
    if not _depth(document, MAX_JSON_DEPTH):
        raise CloudEventError(f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    version = document.get("specversion")
    if version != "1.0":
        raise CloudEventError(f"specversion must be \"1.0\", got {str(version)[:20]!r}")
    attributes = {}
    for name in ("id", "source", "type"):
        value = document.get(name)
        if not isinstance(value, str) or not value:
            raise CloudEventError(f"the CloudEvent has no {name!r} attribute (required by CloudEvents 1.0)")
        attributes[name] = clean_text(value, MAX_NAME_CHARS)
    content_type = document.get("datacontenttype")
    if content_type is not None and (not isinstance(content_type, str)
                                     or content_type.split(";")[0].strip().lower() != "application/json"):
        raise CloudEventError(f"datacontenttype must be application/json, got {str(content_type)[:60]!r}")
    if "data_base64" in document:
        raise CloudEventError("data_base64 is not supported: send the health event as JSON under data.healthEvent")
    data = document.get("data")
    if not isinstance(data, dict):
        raise CloudEventError("the CloudEvent has no data object")
    event = data.get("healthEvent")
    if not isinstance(event, dict):
        raise CloudEventError("the CloudEvent's data has no healthEvent object")
    return CloudEvent(id=attributes["id"], source=attributes["source"], type=attributes["type"], event=event)


# -- settings and tokens -------------------------------------------------------------------------


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NvSentinelPushBack(_Settings):
    """Sending goodput's own verdicts to NVSentinel (as STORE_ONLY events): off unless configured."""

    enabled: bool = False
    target: str = Field(default="", max_length=512, pattern=r"^[^\s]*$")
    """NVSentinel's platform connector: `unix:///var/run/nvsentinel.sock` or `host:port`."""
    token_file: Path | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    agent: str = Field(default="goodput", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")

    @model_validator(mode="after")
    def _target_needed(self) -> NvSentinelPushBack:
        if self.enabled and not self.target:
            raise ValueError("nvsentinel.push_back.enabled needs nvsentinel.push_back.target")
        return self


class TokenReviewSettings(_Settings):
    """Accept Kubernetes ServiceAccount tokens on the gRPC receiver, validated by the API server's
    TokenReview: what NVSentinel's grpc sink sends when its `tokenPath` is a projected token."""

    enabled: bool = False
    api_url: str = Field(default="https://kubernetes.default.svc", max_length=512, pattern=r"^https?://[^\s/?#]+/?$")
    ca_file: Path | None = None
    """The API server's CA; unset, the system's CAs (in a pod: set it to the service account's ca.crt)."""
    token_file: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
    """goodput's own credential for the TokenReview call (re-read on every call: it rotates)."""
    allowed_users: tuple[str, ...] = ()
    """ServiceAccount user names allowed to send events, e.g. `system:serviceaccount:nvsentinel:<sa>`."""
    audiences: tuple[str, ...] = ()
    allow_http: bool = False
    """Accept a plain http:// api_url (a loopback proxy, tests); the tokens travel in its requests."""
    cache_s: float = Field(default=60.0, ge=0, le=3600)
    timeout_s: float = Field(default=5.0, gt=0, le=60)

    @model_validator(mode="after")
    def _complete(self) -> TokenReviewSettings:
        if self.enabled and not self.allowed_users:
            raise ValueError("nvsentinel.token_review.enabled needs nvsentinel.token_review.allowed_users")
        if self.api_url.startswith("http://") and not self.allow_http:
            raise ValueError("nvsentinel.token_review.api_url must be https:// (or set allow_http)")
        return self


class NvSentinelSettings(_Settings):
    """The `nvsentinel` table: receive NVSentinel's health events (docs/nvsentinel.md). Off by default."""

    enabled: bool = False
    grpc_enabled: bool = True
    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(default=8788, ge=0, le=65535)
    http_enabled: bool = True
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8789, ge=0, le=65535)
    http_path: str = Field(default="/v1/nvsentinel/events", max_length=200, pattern=r"^/[A-Za-z0-9._~/\-]*$")
    tokens: tuple[SecretStr, ...] = ()
    """Accepted bearer tokens (at least 16 characters); NVSentinel's grpc sink sends the one in its tokenPath."""
    token_file: Path | None = None
    """A file holding one more accepted token (the same secret NVSentinel mounts); read at startup."""
    allow_unauthenticated: bool = False
    """Without any token the receivers listen only on loopback, unless this says otherwise."""
    oauth_clients: dict[str, SecretStr] = Field(default_factory=dict, max_length=100)
    """OAuth 2.0 client id → client secret: the HTTP receiver also serves a client-credentials token
    endpoint (`oauth_token_path`), so NVSentinel's event exporter (which always fetches its bearer
    token that way) can authenticate against goodput with no identity provider in between."""
    oauth_token_path: str = Field(default="/v1/nvsentinel/token", max_length=200, pattern=r"^/[A-Za-z0-9._~/\-]*$")
    oauth_token_ttl_s: int = Field(default=3600, ge=60, le=86_400)
    max_message_bytes: int = Field(default=4 << 20, ge=1024, le=64 << 20)
    max_events_per_batch: int = Field(default=1000, ge=1, le=100_000)
    max_concurrent_requests: int = Field(default=16, ge=1, le=1024)
    max_event_age_s: float = Field(default=900.0, gt=0)
    """A fatal event older than this (a late redelivery) is recorded, not pinned on the jobs running now."""
    dedup_window_s: float = Field(default=3600.0, gt=0)
    dedup_max_keys: int = Field(default=10_000, ge=1, le=10_000_000)
    evidence_per_node: int = Field(default=20, ge=0, le=1000)
    evidence_max_nodes: int = Field(default=10_000, ge=1, le=1_000_000)
    evidence_max_age_s: float = Field(default=86_400.0, gt=0)
    node_names: dict[str, str] = Field(default_factory=dict, max_length=100_000)
    """NVSentinel (Kubernetes) node name → Slurm node name, where they differ."""
    token_review: TokenReviewSettings = Field(default_factory=TokenReviewSettings)
    push_back: NvSentinelPushBack = Field(default_factory=NvSentinelPushBack)

    @field_validator("node_names")
    @classmethod
    def _slurm_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value.values():
            validate_node_name(name)
        return value

    @field_validator("oauth_clients")
    @classmethod
    def _clients(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for client_id, secret in value.items():
            if not _CLIENT_ID.match(client_id):
                raise ValueError(f"oauth client id {client_id[:40]!r}: use 1-64 of A-Z a-z 0-9 _ . -")
            if len(secret.get_secret_value()) < MIN_TOKEN_CHARS:
                raise ValueError(f"the secret of oauth client {client_id!r} is shorter than {MIN_TOKEN_CHARS} "
                                 "characters")
        return value

    @model_validator(mode="after")
    def _safe(self) -> NvSentinelSettings:
        short = [i for i, t in enumerate(self.tokens) if len(t.get_secret_value()) < MIN_TOKEN_CHARS]
        if short:
            raise ValueError(f"nvsentinel.tokens[{short[0]}] is shorter than {MIN_TOKEN_CHARS} characters")
        if self.http_path == self.oauth_token_path:
            raise ValueError("nvsentinel.http_path and nvsentinel.oauth_token_path must differ")
        if not self.enabled:
            return self
        if not (self.grpc_enabled or self.http_enabled):
            raise ValueError("nvsentinel.enabled needs grpc_enabled or http_enabled")
        shared = bool(self.tokens) or self.token_file is not None
        for host, on, protected in ((self.grpc_host, self.grpc_enabled, shared or self.token_review.enabled),
                                    (self.http_host, self.http_enabled, shared or bool(self.oauth_clients))):
            if on and not protected and not is_loopback(host) and not self.allow_unauthenticated:
                raise ValueError(f"nvsentinel listens on {host} without a token: set nvsentinel.tokens or "
                                 "nvsentinel.token_file (or, on a network only NVSentinel reaches, "
                                 "nvsentinel.allow_unauthenticated = true)")
        return self


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_accepted(header_value: str | None, tokens: Sequence[str]) -> bool:
    """An `Authorization: Bearer <token>` value against every accepted token, in constant time per token.
    With no tokens configured every request is accepted (the settings allow that only deliberately)."""
    if not tokens:
        return True
    if not header_value:
        return False
    scheme, _, token = header_value.strip().partition(" ")
    given = token.strip().encode("utf-8", "replace")
    found = False
    for accepted in tokens:
        found |= hmac.compare_digest(given, accepted.encode("utf-8", "replace"))
    return found and scheme.lower() == "bearer" and bool(given)


_CLIENT_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_OAUTH_CONTEXT = b"goodput nvsentinel oauth access token v1"


def _client_key(secret: str) -> bytes:
    return hmac.digest(secret.encode("utf-8", "replace"), _OAUTH_CONTEXT, "sha256")


def mint_access_token(client_id: str, secret: str, now: datetime, ttl_s: int) -> tuple[str, int]:
    """A bearer token for an OAuth client, good for `ttl_s`: `<client>.<expiry>.<mac>`.

    Stateless and keyed by the client's own secret, so a restarted goodput still accepts the token
    an exporter cached, and rotating the secret revokes every token minted with the old one.
    """
    expiry = int(now.timestamp()) + ttl_s
    mac = hmac.digest(_client_key(secret), f"{client_id}.{expiry}".encode(), "sha256").hex()
    return f"{client_id}.{expiry}.{mac}", ttl_s


def access_token_valid(token: str, clients: Mapping[str, str], now: datetime) -> bool:
    """A token `mint_access_token` made for a configured client, not yet expired."""
    client_id, _, rest = token.partition(".")
    expiry_text, _, mac = rest.partition(".")
    secret = clients.get(client_id)
    if secret is None or not expiry_text.isdigit() or len(expiry_text) > 12 or len(mac) != 64:
        return False
    expected = hmac.digest(_client_key(secret), f"{client_id}.{expiry_text}".encode(), "sha256").hex()
    return hmac.compare_digest(expected, mac) and int(expiry_text) > now.timestamp()


def client_credentials(form: Mapping[str, str], authorization: str | None,
                       clients: Mapping[str, str]) -> str | None:
    """The client id of a valid client-credentials request (HTTP Basic or form fields, RFC 6749
    2.3.1), or None. Every configured secret is compared in constant time."""
    client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return None
            raw_id, _, raw_secret = decoded.partition(":")
            client_id, secret = urllib.parse.unquote_plus(raw_id), urllib.parse.unquote_plus(raw_secret)
    found = None
    for known, expected in clients.items():
        if hmac.compare_digest(known.encode(), client_id.encode("utf-8", "replace")) & hmac.compare_digest(
                expected.encode("utf-8", "replace"), secret.encode("utf-8", "replace")):
            found = known
    return found if secret else None


def read_token_file(path: Path) -> str:
    """The token in a file (surrounding whitespace ignored), checked like a configured one."""
    token = path.expanduser().read_text(encoding="utf-8").strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"the token in {path} is shorter than {MIN_TOKEN_CHARS} characters")
    return token


# -- goodput's verdicts, as events for NVSentinel (push-back) -----------------------------------


def verdict_event(*, node: str, incident_id: str, explanation: str, agent: str, now: datetime,
                  category: Category | None = None, gpus: Sequence[str] = ()) -> HealthEvent:
    """goodput's attribution of a failure to `node` (it drained the node), as a STORE_ONLY health
    event: NVSentinel stores and shows it, and by its own rules never cordons, drains or remediates
    for it. Not fatal and nothing recommended, so goodput's own receivers ignore it if it comes back."""
    entities = [Entity(entity_type="GPU_UUID" if g.startswith(("GPU-", "MIG-")) else "PCI", entity_value=g)
                for g in gpus[:MAX_LIST] if ":gpu" not in g]
    hardware = category in {Category.GPU_HARDWARE, Category.NVLINK}
    return HealthEvent(version=1, agent=agent, component_class="GPU" if hardware else "Node",
                       check_name=f"goodput-{category.value}" if category else "goodput-drain",
                       is_fatal=False, is_healthy=False, message=f"goodput incident {incident_id}: {explanation}",
                       recommended_action=RecommendedAction.NONE, error_code=(category.value,) if category else (),
                       entities_impacted=tuple(entities), generated_timestamp=now, node_name=node,
                       processing_strategy=ProcessingStrategy.STORE_ONLY)
