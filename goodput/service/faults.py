"""One fault, many jobs: the incidents that blamed the same node close together, as one fault.

A node or switch that fails takes every job on it down, and each job's attempt is its own
incident (each recovers on its own schedule). Listed one by one, a storm of such incidents reads
as many problems; as one fault it reads as the one cause it is. Incidents linked to a node
incident (goodput.recover.node_incident) are shown as that fault, with its one isolation
decision; incidents that were never linked (from before the link, or when the node incident was
unreachable) are grouped by the node they blame, within a window of each other. The console's
Faults page and `goodput faults` show both. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from goodput.models import Frozen
from goodput.recover.node_incident import NodeIncidentState, isolation_of
from goodput.service.incidents import IncidentSummary

DEFAULT_WINDOW = timedelta(minutes=10)


class NodeFault(Frozen):
    node: str
    first_at: datetime
    last_at: datetime
    incidents: tuple[IncidentSummary, ...]
    # Set when the fault is a node incident: its id and its one isolation decision; empty when
    # the incidents were only grouped by time.
    node_incident: str = ""
    isolation: str = ""
    linked: int = 0  # job incidents the node incident linked (it lists a bounded number)

    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f"{s.cluster}/{s.job_id}" for s in self.incidents))

    @property
    def hit(self) -> int:
        """Jobs the fault hit: a node incident counts links past the ones it lists."""
        return max(self.linked, len(self.jobs))

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(sorted({s.category for s in self.incidents if s.category}))

    @property
    def states(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for s in self.incidents:
            counts[s.state] += 1
        return dict(sorted(counts.items()))


def node_faults(summaries: Sequence[IncidentSummary], window: timedelta = DEFAULT_WINDOW,
                min_jobs: int = 1) -> list[NodeFault]:
    """Incidents grouped by each node they blame; a group holds incidents each started within
    `window` of the one before it (a fault that keeps hitting jobs stays one fault). Faults that
    hit the most jobs first, then the newest."""
    by_node: dict[tuple[str, str], list[IncidentSummary]] = defaultdict(list)
    for s in summaries:
        if s.started_at is None:
            continue
        for node in s.culprit_nodes:
            by_node[(s.cluster, node)].append(s)
    faults: list[NodeFault] = []
    for (_, node), group in by_node.items():
        group.sort(key=lambda s: (s.started_at, s.incident_id))
        current: list[IncidentSummary] = []
        for s in group:
            assert s.started_at is not None
            if current and s.started_at - (current[-1].started_at or s.started_at) > window:
                faults.append(_fault(node, current))
                current = []
            current.append(s)
        if current:
            faults.append(_fault(node, current))
    kept = [f for f in faults if len(f.jobs) >= min_jobs]
    return sorted(kept, key=lambda f: (-len(f.jobs), -f.last_at.timestamp(), f.node))


def _fault(node: str, incidents: list[IncidentSummary]) -> NodeFault:
    times = [s.started_at for s in incidents if s.started_at is not None]
    return NodeFault(node=node, first_at=min(times), last_at=max(times), incidents=tuple(incidents))


def linked_fault(fault: NodeIncidentState, known: dict[str, IncidentSummary]) -> NodeFault:
    """A node incident as a fault: its job incidents as the newest listing describes them (or
    as the node incident recorded them, when they are older than that listing)."""
    first = fault.first_at or fault.last_at
    incidents = tuple(known.get(link.incident_id) or IncidentSummary(
        incident_id=link.incident_id, job_id=link.job_id, cluster=fault.cluster, culprit_nodes=(fault.node,),
        started_at=link.at, node_incidents=(fault.incident_id,)) for link in fault.links)
    assert first is not None and fault.last_at is not None, "a node incident starts with its first link"
    return NodeFault(node=fault.node, first_at=first, last_at=fault.last_at, incidents=incidents,
                     node_incident=fault.incident_id, isolation=isolation_of(fault), linked=fault.linked)


def all_faults(node_incidents: Sequence[NodeIncidentState], summaries: Sequence[IncidentSummary],
               window: timedelta = DEFAULT_WINDOW, min_jobs: int = 1) -> list[NodeFault]:
    """Every node incident as one fault, and the incidents none of them linked grouped by node
    (`node_faults`); faults that hit the most jobs first, then the newest."""
    known = {s.incident_id: s for s in summaries}
    linked = [linked_fault(f, known) for f in node_incidents if f.last_at is not None]
    ids = {f.incident_id for f in node_incidents}
    seen = {s.incident_id for f in linked for s in f.incidents}
    rest = [s for s in summaries if s.incident_id not in seen and not ids.intersection(s.node_incidents)]
    kept = [f for f in linked if f.hit >= min_jobs]
    return sorted([*kept, *node_faults(rest, window, min_jobs)],
                  key=lambda f: (-f.hit, -f.last_at.timestamp(), f.node))
