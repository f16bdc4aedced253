"""One switch, one drain reason: node incidents under one switch or rack drain as one fault.

A leaf switch or a PDU that fails takes out every node under it, and each node is its own node
incident (goodput.recover.node_incident) whose leader drains it. Slurm takes one `Reason=` per
`scontrol update`, and the CLI backend's coalescer joins only drains with identical reasons; with
the reason naming the incident (`goodput:<incident>: ...`), 20 nodes of one switch were 20
commands. Here the reason names the fault instead: nodes that the topology puts under one switch
(else one rack) and whose incidents were first observed within one window share
`goodput:fault-<group>-<window start>: <summary>`, so their drains in one tick are one command.

The window is anchored on the fault's first incident: the first node incident of a group that a
worker isolates opens a fault starting at its own observed time (`anchored_start`), and every later
one of that group observed within `window_s` of it (before or after) joins that fault. A fixed
grid (the observed time rounded down) needed no memory but split a fault whose anomalies straddled
a grid line into two reasons. The anchors are the worker's (activities.topology.SwitchMap): two
workers may name one switch failure as two faults, which costs nothing in commands (each worker's
coalescer sends its own) and nothing in ownership (each node keeps its own reason).

Ownership stays per node: Slurm keeps the reason on each node, return to service resumes only a
node whose own reason is still exactly goodput's, and the node's node incident and return-to-service
workflow name the job incident that drained it. `owning_fault` says which faults a reason names.
Pure: the isolate activity passes the topology, the time and its worker's anchors.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
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
    anchor: tuple[str, int]  # (group key, fault start): what the worker remembers the open fault by


def _safe_name(name: str) -> str:
    """The group name as the reason's id characters; a name that needed changing gets a short hash
    of the original, so two names that differ only in unsafe characters stay two faults."""
    safe = _SAFE.sub("_", name)[:MAX_GROUP_CHARS]
    if safe == name:
        return safe
    return f"{safe}.{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def group_key(group: Group) -> str:
    """`<kind>-<group>`: what a fault's id and its anchor are keyed by."""
    return f"{group.kind}-{_safe_name(group.name)}"


def fault_id(group: Group, start: int) -> str:
    """`fault-<kind>-<group>-<start, epoch seconds>`: the same for every node of the group whose
    incident joined the fault that opened at `start`."""
    return f"{FAULT_PREFIX}{group_key(group)}-{start}"


def anchored_start(anchors: Mapping[str, int], key: str, observed_at: datetime, window_s: float) -> int:
    """The start of the group's open fault when `observed_at` is within `window_s` of it, else the
    start of a new fault: the observed second itself."""
    at = observed_at.timestamp()
    start = anchors.get(key)
    return start if start is not None and abs(at - start) < window_s else int(at)


def shared_drain(node: str, groups: Sequence[Group], observed_at: datetime | None,
                 window_s: float, anchors: Mapping[str, int] | None = None) -> SharedDrain | None:
    """The shared drain of `node`: its first switch, else its first rack, in the fault `anchors`
    holds open for that group (else a new one); None when sharing is off (`window_s` 0), the
    incident has no observed time (one from before it), or the node is under no group the
    topology knows. The caller records `anchor` in its anchors."""
    if window_s <= 0 or observed_at is None:
        return None
    for kind in ("switch", "rack"):
        group = next((g for g in groups if g.kind == kind and node in g.members), None)
        if group is not None:
            start = anchored_start(anchors or {}, group_key(group), observed_at, window_s)
            return SharedDrain(fault_id=fault_id(group, start), anchor=(group_key(group), start),
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
