"""The cluster-wide drain breaker: many drains at once mean the cause is not the nodes.

A top-of-rack switch or a storage outage makes dozens of jobs fail together, and each incident,
weighed alone, blames its own nodes. Draining them all would turn one network fault into a
cluster-wide outage. The breaker counts drains granted per cluster in a sliding window; a request
that would exceed the budget trips it, and while it is open every drain is refused (the incident
escalates to a person) until the cool-down passes or an operator resets it.

Pure: the breaker workflow holds the state and calls `decide` with `workflow.now()`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from pydantic import Field

from goodput.models import Frozen


class BreakerPolicy(Frozen):
    """How many nodes a cluster may drain within a window before the breaker opens, and for how long."""

    max_drained_nodes: int = Field(default=4, ge=0)
    window_s: float = Field(default=600.0, gt=0)
    cooldown_s: float = Field(default=1800.0, ge=0)


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


class DrainRequest(Frozen):
    """An incident asking to drain `nodes`."""

    incident_id: str
    nodes: tuple[str, ...]


class DrainVerdict(Frozen):
    """The breaker's answer; `open` when it refused because it is (or just became) open."""

    allowed: bool
    reason: str
    open: bool = False


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


def reset(state: BreakerState) -> BreakerState:
    """The state with the breaker closed again (an operator's `goodput breaker reset`); grants kept."""
    return state.model_copy(update={"tripped_at": None})


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
