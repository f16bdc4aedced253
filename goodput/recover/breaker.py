"""The cluster-wide drain breaker: many drains at once mean the cause is not the nodes.

A top-of-rack switch or a storage outage makes dozens of jobs fail together, and each incident,
weighed alone, blames its own nodes. Draining them all would turn one network fault into a
cluster-wide outage. The breaker counts drains granted per cluster in a sliding window; a request
that would exceed the budget trips it, and while it is open every drain is refused (the incident
escalates to a person) until the cool-down passes or an operator resets it.

The breaker also limits drains per switch and per rack (`switches`, `racks`: a configured map of
the site's topology, Slurm hostlist expressions; without a configured switch map, Slurm's own leaf
switches from topology.conf, `with_slurm_switches`). Nodes under one switch failing together are
more often the switch than N bad nodes: a drain that would pass a group's limit trips that group,
and further drains under it are refused until the cool-down passes or an operator resets the
breaker: the incident waits for an operator's approval, told the switch is the likelier culprit,
and an approved drain passes the group's limit (not the cluster's). The rest of the cluster
drains as before.

Pure: the breaker workflow holds the state and calls `decide` with `workflow.now()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

from pydantic import Field, field_validator

from goodput.models import Frozen
from goodput.scheduler import SlurmSwitch
from goodput.slurm.hostlist import expand_hostlist
from goodput.slurm.topology import leaf_switches

MAX_GROUPS = 10_000


class TopologyGroup(Frozen):
    """One switch or rack of the site's topology map: its name and its nodes (a Slurm hostlist)."""

    name: str = Field(min_length=1, max_length=128)
    nodes: str = Field(min_length=1, max_length=65_536)

    @field_validator("nodes")
    @classmethod
    def _a_hostlist(cls, nodes: str) -> str:
        expand_hostlist(nodes)  # a malformed map is a settings error at start, not a crash at a drain
        return nodes

    def members(self) -> frozenset[str]:
        """The group's node names."""
        return frozenset(expand_hostlist(self.nodes))


class BreakerPolicy(Frozen):
    """How many nodes a cluster may drain within a window before the breaker opens, and for how long;
    and how many under one switch or one rack (0: no such limit)."""

    max_drained_nodes: int = Field(default=4, ge=0)
    window_s: float = Field(default=600.0, gt=0)
    cooldown_s: float = Field(default=1800.0, ge=0)
    max_drains_per_switch: int = Field(default=0, ge=0)
    max_drains_per_rack: int = Field(default=0, ge=0)
    switches: tuple[TopologyGroup, ...] = Field(default=(), max_length=MAX_GROUPS)
    racks: tuple[TopologyGroup, ...] = Field(default=(), max_length=MAX_GROUPS)

    def groups_of(self, node: str) -> tuple[tuple[str, int], ...]:
        """The limited groups `node` is under, as ("switch s1", limit) pairs."""
        return tuple((f"{kind} {g.name}", limit)
                     for kind, groups, limit in (("switch", self.switches, self.max_drains_per_switch),
                                                 ("rack", self.racks, self.max_drains_per_rack))
                     if limit > 0 for g in groups if node in g.members())


def with_slurm_switches(policy: BreakerPolicy, switches: Sequence[SlurmSwitch]) -> BreakerPolicy:
    """The policy with Slurm's leaf switches (topology.conf) as its switch map, where it limits drains
    per switch and the site configured no map of its own: a configured map overrides Slurm's."""
    if policy.switches or policy.max_drains_per_switch <= 0:
        return policy
    leaves = leaf_switches(switches)[:MAX_GROUPS]
    if not leaves:
        return policy
    return policy.model_copy(update={"switches": tuple(TopologyGroup(name=s.name, nodes=s.nodes) for s in leaves)})


class DrainGrant(Frozen):
    """Nodes an incident was allowed to drain, and when."""

    incident_id: str
    nodes: tuple[str, ...]
    at: datetime


class BreakerState(Frozen):
    """A cluster breaker's memory: recent grants, when it tripped, and how often it tripped and refused."""

    grants: tuple[DrainGrant, ...] = ()
    tripped_at: datetime | None = None
    trips: int = 0
    refused: int = 0
    # Switches and racks whose limit tripped ("switch s1"), and when: drains under them are refused.
    tripped_groups: dict[str, datetime] = Field(default_factory=dict)


class DrainRequest(Frozen):
    """An incident asking to drain `nodes`; `approved_past_groups` when an operator approved the
    drain after a switch's or rack's limit refused it (the cluster's own limit still applies)."""

    incident_id: str
    nodes: tuple[str, ...]
    approved_past_groups: bool = False


class DrainVerdict(Frozen):
    """The breaker's answer; `open` when it refused because it is (or just became) open."""

    allowed: bool
    reason: str
    open: bool = False
    group: str = ""  # the switch or rack whose limit refused it ("switch s1"), "" otherwise


def _recent(state: BreakerState, now: datetime, policy: BreakerPolicy) -> tuple[DrainGrant, ...]:
    horizon = now - timedelta(seconds=policy.window_s)
    return tuple(g for g in state.grants if g.at > horizon)


def decide(state: BreakerState, request: DrainRequest, now: datetime,
           policy: BreakerPolicy) -> tuple[BreakerState, DrainVerdict]:
    """The breaker's state after `request`, and its answer: a retry gets the same grant, an open breaker refuses."""
    grants = _recent(state, now, policy)
    mine = [g for g in grants if g.incident_id == request.incident_id]
    if mine and set(request.nodes) <= {n for g in mine for n in g.nodes}:
        # A retried activity asks again: same answer, no double counting.
        return state.model_copy(update={"grants": grants}), DrainVerdict(allowed=True, reason="already granted")

    tripped_at = state.tripped_at
    if tripped_at is not None and now - tripped_at >= timedelta(seconds=policy.cooldown_s):
        tripped_at = None
    if tripped_at is not None:
        return (state.model_copy(update={"grants": grants, "refused": state.refused + 1}),
                DrainVerdict(allowed=False, open=True,
                             reason=f"drain breaker open since {tripped_at.isoformat()}: too many drains "
                                    f"in the cluster; a person must look (or `goodput breaker reset`)"))

    drained = {n for g in grants for n in g.nodes}
    groups = _open_groups(state, now, policy)
    refused = None if request.approved_past_groups else _group_refusal(groups, drained, request, now, policy)
    if refused is not None:
        group, verdict = refused
        return (state.model_copy(update={"grants": grants, "tripped_groups": {**groups, group: groups.get(group, now)},
                                         "refused": state.refused + 1}), verdict)
    state = state.model_copy(update={"tripped_groups": groups})
    wanted = drained | set(request.nodes)
    if len(wanted) > policy.max_drained_nodes:
        return (state.model_copy(update={"grants": grants, "tripped_at": now, "trips": state.trips + 1,
                                         "refused": state.refused + 1}),
                DrainVerdict(allowed=False, open=True,
                             reason=f"drain breaker tripped: {len(wanted)} nodes would be drained within "
                                    f"{policy.window_s:.0f}s (limit {policy.max_drained_nodes}); a shared "
                                    f"cause (switch, storage, scheduler) is more likely than bad nodes"))
    grant = DrainGrant(incident_id=request.incident_id, nodes=request.nodes, at=now)
    return (state.model_copy(update={"grants": (*grants, grant), "tripped_at": None}),
            DrainVerdict(allowed=True, reason=f"{len(wanted)}/{policy.max_drained_nodes} drains in window"))


def _open_groups(state: BreakerState, now: datetime, policy: BreakerPolicy) -> dict[str, datetime]:
    cooldown = timedelta(seconds=policy.cooldown_s)
    return {g: at for g, at in state.tripped_groups.items() if now - at < cooldown}


def _group_refusal(open_groups: dict[str, datetime], drained: set[str], request: DrainRequest, now: datetime,
                   policy: BreakerPolicy) -> tuple[str, DrainVerdict] | None:
    """The first switch or rack of the request's nodes that is tripped, or that it would trip."""
    for node in request.nodes:
        for group, limit in policy.groups_of(node):
            if group in open_groups:
                return group, DrainVerdict(allowed=False, group=group, reason=(
                    f"{group} drain limit tripped at {open_groups[group].isoformat()}: drains under it wait "
                    f"for an operator's approval; the {group.split()[0]} is the likelier culprit than its nodes"))
            under = sorted(n for n in drained | set(request.nodes)
                           if any(g == group for g, _ in policy.groups_of(n)))
            if len(under) > limit:
                return group, DrainVerdict(allowed=False, group=group, reason=(
                    f"{group} drain limit tripped: {len(under)} of its nodes would be drained within "
                    f"{policy.window_s:.0f}s ({', '.join(under)}; limit {limit}); the {group.split()[0]} is "
                    "the likelier culprit than that many bad nodes: the drain waits for an operator's approval"))
    return None


def reset(state: BreakerState) -> BreakerState:
    """The state with the breaker closed again (an operator's `goodput breaker reset`); grants kept."""
    return state.model_copy(update={"tripped_at": None, "tripped_groups": {}})


class DrainGate(Protocol):
    """Where a recovery asks the cluster's breaker for permission to drain."""

    async def reserve(self, cluster: str, request: DrainRequest, policy: BreakerPolicy) -> DrainVerdict:
        """Ask the cluster's breaker to let `request`'s incident drain its nodes."""
        ...


class LocalDrainGate:
    """In-process breaker for tests and single-process tools; the service uses the workflow."""

    def __init__(self) -> None:
        self.states: dict[str, BreakerState] = {}

    async def reserve(self, cluster: str, request: DrainRequest, policy: BreakerPolicy) -> DrainVerdict:
        """`decide` on this process's state of `cluster`."""
        state, verdict = decide(self.states.get(cluster, BreakerState()), request, datetime.now(UTC), policy)
        self.states[cluster] = state
        return verdict
