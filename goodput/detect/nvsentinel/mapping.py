"""From a fatal NVSentinel event to goodput's anomalies: which node, which jobs, which GPUs, what evidence.

`event_anomalies` turns a fatal event into one anomaly per opted-in job attempt running on the
node, with the node and the GPUs it names as culprits and the event's fields as evidence. Node
names are checked before any scheduler sees them, and an event can only reach jobs Slurm says
are running on a node Slurm knows. Nothing here does I/O or reads a clock; the adapter
(activities.adapters.nvsentinel) asks the scheduler and submits the anomalies.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from goodput.detect.gpu import normalize_pci_bus_id
from goodput.detect.nvsentinel.disposition import Disposition, Triage
from goodput.detect.nvsentinel.events import HealthEvent, NvSentinelEventError
from goodput.detect.nvsentinel.wire import MAX_LIST, clean_text
from goodput.detect.watch import OptInRule
from goodput.diagnose.source_grades import nvsentinel_grade
from goodput.identifiers import InvalidIdentifierError, validate_node_name
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category
from goodput.ownership import is_goodput_reason
from goodput.scheduler import JobInfo, JobState, NodeInfo

MAX_EARLIER_LINES = 5


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
    grade = nvsentinel_grade(event.recommended_action.value)
    return [Anomaly(id=anomaly_id(event, cluster=cluster, job=job, node=node), source=AnomalySource.GPU,
                    kind=kind, cluster=cluster, job_id=job.job_id, job_attempt=job.restart_count,
                    nodes=(node,) if triaged.blame_node else (), gpus=impacted_gpus(event, node),
                    evidence=evidence, category=category, signature_ids=_xid_signatures(event),
                    observed_at=when, detected_at=now, confidence=grade.confidence)
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
