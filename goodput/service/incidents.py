"""What the CLI and the web console need from a running goodput, as a Protocol.

The Temporal-backed implementation lives in `workers.client`; keeping the seam here, beside
neither tool, lets both stay free of Temporal and of each other, and be tested with a fake.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from goodput.models import Anomaly, Frozen, Mode
from goodput.recover.incident import Decision, IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy


class ServiceError(Exception):
    """Something the operator can act on; the message is printed as is."""


class ServiceUnavailableError(ServiceError):
    """goodput's service cannot be reached (Temporal down, or no worker answering)."""


class TemporalStartingError(ServiceUnavailableError):
    """Temporal refused the connection or answered that it is not serving yet: a server starting
    (or restarting) answers this way for a few seconds, so a process starting beside it waits.
    `reason` is the server's or the OS's own words ("Connection refused"), for the wait's message."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class UnknownIncidentError(ServiceError):
    """No incident with that id."""


class DecisionRejectedError(ServiceError):
    """The incident does not take that decision now (not awaiting approval, or already closed)."""


# The most anomalies of one incident one delivery carries (workers.watch.IncidentSink folds them):
# a bound on one signal's payload, far above a burst's usual ten.
FOLD_MAX = 50


class InjectResult(Frozen):
    """Where an injected anomaly went: a new incident or one already open for its job attempt."""

    incident_id: str
    new_incident: bool
    note: str = ""


class IncidentSummary(Frozen):
    """One incident as lists show it: its job, state, mode, verdict, outcome and when."""

    incident_id: str
    job_id: str = ""
    cluster: str = ""
    state: str = ""
    mode: str = ""
    category: str = ""
    culprit_nodes: tuple[str, ...] = ()
    outcome: str = ""
    started_at: datetime | None = None
    closed_at: datetime | None = None
    running: bool = False
    # The node incidents (one fault, many jobs) it is linked to; empty for incidents never linked.
    node_incidents: tuple[str, ...] = ()


class IncidentService(Protocol):
    """What a running goodput offers its operator's tools (the CLI and the console)."""
    async def inject(self, anomaly: Anomaly, policy: Policy | None, mode: Mode | None = None) -> InjectResult:
        """Send an anomaly to its incident, starting one when none is open: under `policy`, the
        service's own (its watchers and receivers), or under None the service's policy, which the
        incident asks for, with `mode` a request that may make it stricter, never looser."""
        ...

    async def inject_batch(self, anomalies: Sequence[Anomaly], policy: Policy | None,
                           mode: Mode | None = None) -> InjectResult:
        """`inject` for several anomalies of one incident (one job attempt) as one delivery, each
        folded into the incident exactly as if injected alone; at most FOLD_MAX of them."""
        ...

    async def list_incidents(self, limit: int = 50, cluster: str | None = None) -> Sequence[IncidentSummary]:
        """The newest `limit` incidents (of `cluster` only, when given), newest first."""
        ...

    async def get(self, incident_id: str) -> IncidentReport:
        """The full report of one incident; UnknownIncidentError when there is none."""
        ...

    async def decide(self, incident_id: str, decision: Decision) -> IncidentState:
        """Record an operator's decision (approve, reject, ...) and return the incident's state after it."""
        ...
