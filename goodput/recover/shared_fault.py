"""One switch, one drain reason: node incidents under one switch or rack drain as one fault.

A leaf switch or a PDU that fails takes out every node under it, and each node is its own node
incident (goodput.recover.node_incident) whose leader drains it. Slurm takes one `Reason=` per
`scontrol update`, and the CLI backend's coalescer joins only drains with identical reasons; with
the reason naming the incident (`goodput:<incident>: ...`), 20 nodes of one switch were 20
commands. Here the reason names the fault instead: nodes that the topology puts under one switch
(else one rack) and whose incidents were first observed within one window share
`goodput:fault-<group>-<window start>: <summary>`, so their drains in one tick are one command.

The window is a fixed grid of `window_s` (the window start is the observed time rounded down), not
"within `window_s` of the first anomaly": the grid needs no coordination between incidents (each
decides alone, in its own isolate activity, and all decide alike), at the cost that a fault whose
anomalies straddle a grid line drains with two reasons, two commands instead of one.

Ownership stays per node: Slurm keeps the reason on each node, return to service resumes only a
node whose own reason is still exactly goodput's, and the node's node incident and return-to-service
workflow name the job incident that drained it. `owning_fault` says which faults a reason names.
Pure: the isolate activity passes the topology and the time.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import datetime

from goodput.models import Frozen
from goodput.ownership import owning_incident
from goodput.slurm.hostlist import expand_hostlist

FAULT_PREFIX = "fault-"
MAX_GROUP_CHARS = 64
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


class Group(Frozen):
    """A switch or rack and its node names, as the topology gives them."""

    kind: str  # "switch" or "rack"
    name: str
    members: frozenset[str]


class SharedDrain(Frozen):
    """The fault a node's drain belongs to and the reason every member drains with."""

    fault_id: str
    reason_summary: str


def _safe_name(name: str) -> str:
    """The group name as the reason's id characters; a name that needed changing gets a short hash
    of the original, so two names that differ only in unsafe characters stay two faults."""
    safe = _SAFE.sub("_", name)[:MAX_GROUP_CHARS]
    if safe == name:
        return safe
    return f"{safe}.{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def fault_id(group: Group, observed_at: datetime, window_s: float) -> str:
    """`fault-<kind>-<group>-<window start, epoch seconds>`: the same for every node of the group
    whose incident was first observed in the same window."""
    start = int(observed_at.timestamp() // window_s * window_s)
    return f"{FAULT_PREFIX}{group.kind}-{_safe_name(group.name)}-{start}"


def shared_drain(node: str, groups: Sequence[Group], observed_at: datetime | None,
                 window_s: float) -> SharedDrain | None:
    """The shared drain of `node`: its first switch, else its first rack; None when sharing is off
    (`window_s` 0), the incident has no observed time (one from before it), or the node is under no
    group the topology knows."""
    if window_s <= 0 or observed_at is None:
        return None
    for kind in ("switch", "rack"):
        group = next((g for g in groups if g.kind == kind and node in g.members), None)
        if group is not None:
            return SharedDrain(fault_id=fault_id(group, observed_at, window_s),
                               reason_summary=f"node fault under {kind} {group.name[:128]} (drained as one fault)")
    return None


def owning_fault(reason: str) -> str | None:
    """The fault id a shared drain's reason names, or None (not goodput's, or one incident's)."""
    owner = owning_incident(reason)
    return owner if owner is not None and owner.startswith(FAULT_PREFIX) else None


def topology_groups(switches: Sequence[tuple[str, str]], racks: Sequence[tuple[str, str]]) -> tuple[Group, ...]:
    """The groups of (name, Slurm hostlist) switch and rack maps (the hostlists already checked
    and bounded: the breaker's settings, or `goodput.slurm.topology`)."""
    return (*(Group(kind="switch", name=n, members=frozenset(expand_hostlist(h))) for n, h in switches),
            *(Group(kind="rack", name=n, members=frozenset(expand_hostlist(h))) for n, h in racks))
