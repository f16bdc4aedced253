"""One fault, many jobs: the incidents that blamed the same node close together, as one fault.

A node or switch that fails takes every job on it down, and each job's attempt is its own
incident (each recovers on its own schedule). Listed one by one, a storm of such incidents reads
as many problems; grouped by the node they blame, within a window of each other, it reads as the
one cause it is. The console's Faults page and `goodput faults` show these groups. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from goodput.cli.service import IncidentSummary
from goodput.models import Frozen

DEFAULT_WINDOW = timedelta(minutes=10)


class NodeFault(Frozen):
    node: str
    first_at: datetime
    last_at: datetime
    incidents: tuple[IncidentSummary, ...]

    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f"{s.cluster}/{s.job_id}" for s in self.incidents))

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
