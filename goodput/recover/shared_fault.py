"""One switch, one drain reason: node incidents under one switch or rack drain as one fault.

A leaf switch or a PDU that fails takes out every node under it, and each node is its own node
incident (goodput.recover.node_incident) whose leader drains it. Slurm takes one `Reason=` per
`scontrol update`, and the CLI backend's coalescer joins only drains with identical reasons; with
the reason naming the incident (`goodput:<incident>: ...`), 20 nodes of one switch were 20
commands. Here the reason names the fault instead: nodes that the topology puts under one switch
(else one rack) and whose incidents were first observed within one window share
`goodput:fault-<group>-<window start>: <summary>`, so their drains in one tick are one command.

The window is anchored on the fault's first node incident (`join_fault`): the first of a group
that a worker isolates opens a fault at its own observed time and drains with its incident's own
reason (so a lone node fault's reason still names its incident and cause), and every later node
incident of that group observed within `window_s` of it, before or after, drains with the fault's
reason. A fixed grid (the observed time rounded down) needed no memory but split a fault whose
anomalies straddled a grid line into two reasons, and named a switch on every lone node's drain.
Open faults are the worker's (activities.topology.SwitchMap): two workers may name one switch
failure as two faults, which costs nothing in commands (each worker's coalescer sends its own) and
nothing in ownership (each node keeps its own reason).

Ownership stays per node: Slurm keeps the reason on each node, return to service resumes only a
node whose own reason still names the incident it tracks or one of that incident's faults (the
incident hands them to the node's return-to-service workflow), and the node's node incident and
return-to-service workflow name the job incident that drained it. `owning_fault` says which faults a reason names.
Pure: the isolate activity passes the topology, the time and its worker's open faults.
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


class OpenFault(Frozen):
    """A fault a worker holds open for one switch or rack: when it opened and which node incident
    drained each node in it (the first is the opener's)."""

    group: str  # the group's key (`group_key`)
    start: int  # epoch seconds: the opener's observed time
    members: dict[str, str]  # node -> incident

    @property
    def opener(self) -> str:
        return next(iter(self.members))


def join_fault(faults: Mapping[str, OpenFault], groups: Sequence[Group], node: str, incident: str,
               observed_at: datetime | None, window_s: float) -> tuple[SharedDrain | None, OpenFault | None]:
    """How node `node`'s drain for `incident` goes: (the shared drain, or None for the incident's
    own reason; the group's fault as the caller must now remember it, or None when unchanged).

    The first node incident of a switch (else rack) opens a fault and drains with its own reason:
    a lone fault (one node, one XID) keeps a reason naming its incident and its cause, and every
    later node incident of that group observed within `window_s` of the opener (either side)
    drains with the fault's one reason, one command. A retry of a member's drain gets the same
    answer again; another incident of a node the fault already drained (put back, failing again)
    is a new failure and keeps its own reason. Sharing off (`window_s` 0), no observed time (an
    incident from before it) or a node under no known group: its own reason."""
    if window_s <= 0 or observed_at is None:
        return None, None
    for kind in ("switch", "rack"):
        group = next((g for g in groups if g.kind == kind and node in g.members), None)
        if group is None:
            continue
        at, fault = observed_at.timestamp(), faults.get(group_key(group))
        if fault is None or abs(at - fault.start) >= window_s:
            return None, OpenFault(group=group_key(group), start=int(at), members={node: incident})
        shared = SharedDrain(fault_id=fault_id(group, fault.start),
                             reason_summary=f"node fault under {kind} {group.name[:128]} (drained as one fault)")
        if node not in fault.members:
            return shared, fault.model_copy(update={"members": {**fault.members, node: incident}})
        return (shared if fault.members[node] == incident and node != fault.opener else None), None
    return None, None


def owning_fault(reason: str) -> str | None:
    """The fault id a shared drain's reason names, or None (not goodput's, or one incident's)."""
    owner = owning_incident(reason)
    return owner if owner is not None and owner.startswith(FAULT_PREFIX) else None


def topology_groups(switches: Sequence[tuple[str, str]], racks: Sequence[tuple[str, str]]) -> tuple[Group, ...]:
    """The groups of (name, Slurm hostlist) switch and rack maps (the hostlists already checked
    and bounded: the breaker's settings, or `goodput.slurm.topology`)."""
    return (*(Group(kind="switch", name=n, members=frozenset(expand_hostlist(h))) for n, h in switches),
            *(Group(kind="rack", name=n, members=frozenset(expand_hostlist(h))) for n, h in racks))
