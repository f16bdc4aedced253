"""The kill switch: one operator action puts every partition of a cluster back into monitor mode.

A site trusts goodput partition by partition (`policy.partition_modes`). When something looks
wrong (a storm of bad drains, a scheduler upgrade, an incident review) an operator needs to stop
every autonomous action at once without editing configuration or restarting workers, and to
release it as quickly; both with a reason, both audited. The switch lives in a per-cluster
entity workflow (workflows.kill_switch); recovery workflows consult it before acting. Pure.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from pydantic import Field

from goodput.models import Frozen, Mode, OperatorDecision

MAX_CHANGES = 50


class KillSwitchChange(Frozen):
    """One operator's engaging or releasing of the switch."""

    engaged: bool
    by: OperatorDecision
    at: datetime


class KillSwitchState(Frozen):
    """A cluster's kill switch: engaged or not, and its recent changes."""

    engaged: bool = False
    # The newest changes, newest last; the last one says who engaged (or released) it and why.
    changes: tuple[KillSwitchChange, ...] = Field(default=(), max_length=MAX_CHANGES)

    @property
    def last(self) -> KillSwitchChange | None:
        """The newest change, or None when it never changed."""
        return self.changes[-1] if self.changes else None


def switch(state: KillSwitchState, engaged: bool, by: OperatorDecision, now: datetime) -> KillSwitchState:
    """The state after an operator engages or releases the switch (a repeat is recorded too)."""
    change = KillSwitchChange(engaged=engaged, by=by, at=now)
    return KillSwitchState(engaged=engaged, changes=(*state.changes, change)[-MAX_CHANGES:])


def effective_mode(mode: Mode, state: KillSwitchState) -> tuple[Mode, str]:
    """The mode an incident may act in, and why when the switch changed it."""
    if not state.engaged or mode is Mode.MONITOR:
        return mode, ""
    last = state.last
    who = f" by {last.by.who} at {last.at:%Y-%m-%d %H:%M:%S}Z: {last.by.reason}" if last else ""
    return Mode.MONITOR, f"kill switch engaged{who}; {mode} mode suspended, monitor mode instead"


class KillSwitchReader(Protocol):
    """Where a recovery reads its cluster's switch (the entity workflow, or a fake)."""

    async def read(self, cluster: str) -> KillSwitchState:
        """The switch of `cluster` as it stands now."""
        ...
