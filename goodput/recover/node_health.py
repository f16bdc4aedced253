"""Return to service: when a node goodput drained may take work again, and when it never should.

A drain that is never undone shrinks the cluster one failure at a time. A node goodput drained
waits out a quarantine, then passes the site's health check (a configured command run against
the node: DCGM diagnostics, a site script) before goodput resumes it, and only if the drain is
still the drain this return tracks (an administrator's later drain is theirs, and so is another
goodput incident's: `not_ours`). A node that keeps failing its
check, or keeps being drained again soon after it returned, is escalated to a person and stays
drained. These rules are pure; workflows.node_health runs them durably, one workflow per node.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from pydantic import Field

from goodput.identifiers import validate_node_name
from goodput.models import Frozen
from goodput.ownership import owning_incident
from goodput.recover.shared_fault import owning_fault
from goodput.recover.spares import SparePolicy

MAX_OUTPUT = 2000


class ReturnToServicePolicy(Frozen):
    """`[policy.return_to_service]`: off until the site names its health check."""

    enabled: bool = False
    quarantine_s: float = Field(default=1800.0, ge=0.0, le=30 * 86400.0)
    # argv of the check; `{node}` is replaced by the node's name, e.g.
    # ["srun", "-w", "{node}", "-N1", "--reservation=maint", "/opt/site/gpu-check.sh"]
    # or ["ssh", "{node}", "dcgmi", "diag", "-r", "2"]. Exit status 0 passes.
    check_command: tuple[str, ...] = ()
    check_timeout_s: float = Field(default=900.0, gt=0.0, le=86400.0)
    retry_after_s: float = Field(default=1800.0, ge=0.0, le=30 * 86400.0)
    max_check_failures: int = Field(default=3, ge=1, le=100)
    # Drained again this many times within the window: the node is a lemon, a person decides.
    max_offences: int = Field(default=3, ge=1, le=100)
    offence_window_s: float = Field(default=7 * 86400.0, gt=0.0, le=365 * 86400.0)


class Phase(StrEnum):
    """Where a drained node stands on its way back to service."""

    QUARANTINED = "quarantined"
    CHECKING = "checking"
    RETURNED = "returned"
    ESCALATED = "escalated"
    NOT_OURS = "not-ours"  # someone else's drain now: goodput leaves the node alone


class NodeHealthState(Frozen):
    """One drained node's return to service: its phase, its drains in the window and its failed checks."""

    cluster: str
    node: str
    phase: Phase = Phase.QUARANTINED
    incident_id: str = ""
    # The faults whose shared drain reason that incident's drains carried (goodput.recover.shared_fault).
    faults: tuple[str, ...] = ()
    drains: tuple[datetime, ...] = ()  # goodput's drains of this node inside the offence window
    failures: int = 0
    last_check: str = ""
    why: str = ""
    # An operator asked for the check now (`goodput nodes return`): who, and why; "" otherwise.
    requested_by: str = Field(default="", max_length=2200)


class CheckResult(Frozen):
    """The site's health check on a node: passed or not, with its (bounded) output."""

    passed: bool
    detail: str = Field(default="", max_length=MAX_OUTPUT)
    # False when the check could not run (none configured, not found, timed out): not passing then
    # says nothing about the node, which matters where a failed check is evidence against it.
    ran: bool = True


class NodeCheckInput(Frozen):
    """The health check's argv for one node, and its time limit."""

    argv: tuple[str, ...]
    timeout_s: float


class ReturnInput(Frozen):
    """The node to put back into service, and whose drain on it may be undone.

    The node's reason must name `incident_id` or one of `faults` (the shared reasons that incident's
    drains carried); "" (inputs recorded before the field) accepts any goodput reason, as before."""

    cluster: str
    node: str
    incident_id: str = ""
    faults: tuple[str, ...] = ()


class ReturnResult(Frozen):
    """Whether the node was put back into service, and what the scheduler said."""

    returned: bool
    detail: str


class NodeHealthStarter(Protocol):
    """Hands a node goodput just drained to its return-to-service workflow."""

    async def drained(self, cluster: str, node: str, incident_id: str, policy: ReturnToServicePolicy, *,
                      rule: str = "", spares: SparePolicy | None = None, faults: tuple[str, ...] = ()) -> None:
        """`spares`: the pool the node refills once back in service (None: no pool); `rule`: the
        rule whose verdict drained it (goodput.recover.trust); `faults`: the shared drain reasons
        the incident's drains carried (its drain of this node may carry one of them)."""
        ...


class NodeCheck(Protocol):
    """Runs the site's health check against one node (the real one: a command; tests: a fake)."""

    async def run(self, argv: tuple[str, ...], timeout_s: float) -> CheckResult:
        """Run the check's argv within `timeout_s`: a failure or a timeout is a result, not an exception."""
        ...


def check_argv(command: tuple[str, ...], node: str) -> tuple[str, ...]:
    """The check's argv for one node; the name is validated (it goes on a command line)."""
    validate_node_name(node)
    return tuple(arg.replace("{node}", node) for arg in command)


def drained(state: NodeHealthState, incident_id: str, now: datetime,
            policy: ReturnToServicePolicy, faults: tuple[str, ...] = ()) -> NodeHealthState:
    """goodput drained the node (again): quarantine it, or escalate a repeat offender. The drain
    tracked from now on is this incident's (its own reason, or one of its faults')."""
    horizon = now - timedelta(seconds=policy.offence_window_s)
    drains = (*(d for d in state.drains if d > horizon), now)
    base = state.model_copy(update={"incident_id": incident_id, "faults": faults, "drains": drains, "failures": 0,
                                    "requested_by": ""})
    if len(drains) >= policy.max_offences:
        return base.model_copy(update={
            "phase": Phase.ESCALATED,
            "why": f"drained {len(drains)} times within {policy.offence_window_s / 86400:g} day(s): "
                   "stays drained until a person looks at it"})
    return base.model_copy(update={"phase": Phase.QUARANTINED,
                                   "why": f"quarantined for {policy.quarantine_s:.0f} s after incident {incident_id}"})


_NO_RETURN = {
    Phase.CHECKING: "its health check is running now",
    Phase.RETURNED: "it is back in service already",
    Phase.ESCALATED: "it was escalated to a person: resume it with scontrol once it is fixed",
    Phase.NOT_OURS: "its drain is someone else's now",
}


def return_refusal(state: NodeHealthState) -> str:
    """Why an operator's request to end the quarantine now cannot be taken ("" when it can).

    Only a quarantined node can be asked for: the request skips the wait, never the health check,
    so a person's impatience cannot put a faulty node back."""
    return "" if state.phase is Phase.QUARANTINED else f"node {state.node}: {_NO_RETURN[state.phase]}"


def return_requested(state: NodeHealthState, who: str, reason: str) -> NodeHealthState:
    """An operator ended the quarantine: the health check runs now."""
    by = f"{who} ({reason})"[:2200]
    return state.model_copy(update={"requested_by": by, "why": f"return requested by {by}: checking now"[:2000]})


def checked(state: NodeHealthState, result: CheckResult, policy: ReturnToServicePolicy) -> NodeHealthState:
    """After one health check: ready to return, to be checked again later, or escalated."""
    detail = result.detail[:MAX_OUTPUT]
    if result.passed:
        return state.model_copy(update={"phase": Phase.CHECKING, "last_check": detail, "why": "health check passed"})
    failures = state.failures + 1
    if failures >= policy.max_check_failures:
        return state.model_copy(update={
            "phase": Phase.ESCALATED, "failures": failures, "last_check": detail,
            "why": f"failed its health check {failures} time(s): stays drained until a person looks at it"})
    return state.model_copy(update={"phase": Phase.QUARANTINED, "failures": failures, "last_check": detail,
                                    "requested_by": "",  # the next try is goodput's own again
                                    "why": f"failed its health check ({failures} of {policy.max_check_failures}); "
                                           f"checking again in {policy.retry_after_s:.0f} s"})


def not_ours(node: str, reason: str, request: ReturnInput) -> str:
    """Why the drain `reason` on `node` is not the one `request` may undo ("" when it is).

    An administrator's reason (no `goodput:` prefix) is theirs. A goodput reason that names
    neither the tracked incident nor one of its faults is a later drain by goodput for another
    incident, which a return for the earlier one must not undo. Only the reason's id is read,
    never its summary, so a job's bytes in a summary cannot make a drain look like this one."""
    owner = owning_incident(reason)
    if owner is None:
        return f"{node} is drained by someone else now ({reason[:120]!r}): left alone"
    if request.incident_id and owner not in (request.incident_id, *request.faults):
        what = "fault" if owning_fault(reason) else "incident"
        return (f"{node} was drained again by goodput for {what} {owner} (this return is for incident "
                f"{request.incident_id}): left alone")
    return ""
