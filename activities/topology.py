"""Slurm's switch map for the drain breaker and shared drains, read through the scheduler at most every few minutes,
and the shared-drain faults this worker holds open per switch or rack.

The breaker limits drains per switch; a site that runs TopologyPlugin=topology/tree has that map
in Slurm already. Reading it for every drain request would put a `scontrol show topology` on the
path of every recovery, and a topology changes when hardware is recabled, not between drains; so
it is read at most once per `refresh_s`, and a read that fails keeps the last map known (none at
first) with a warning: the breaker's own cluster limit never depends on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from goodput.recover.breaker import BreakerPolicy, with_slurm_switches
from goodput.recover.shared_fault import Group, OpenFault, SharedDrain, join_fault, topology_groups
from goodput.scheduler import Scheduler, SchedulerError, SlurmSwitch
from goodput.slurm.topology import leaf_switches

log = logging.getLogger(__name__)

TOPOLOGY_REFRESH_S = 300.0


class SwitchMap:
    """One scheduler's leaf switches, cached for `refresh_s`."""

    def __init__(self, scheduler: Scheduler, refresh_s: float = TOPOLOGY_REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._scheduler = scheduler
        self._refresh_s = refresh_s
        self._clock = clock
        self._switches: tuple[SlurmSwitch, ...] = ()
        self._read_at: float | None = None
        self._lock = asyncio.Lock()
        # group key -> the fault this worker holds open for it (goodput.recover.shared_fault); one
        # per switch or rack of the topology (its members at most the group's nodes), replaced when
        # a later fault of the group opens
        self._faults: dict[str, OpenFault] = {}

    async def switches(self) -> tuple[SlurmSwitch, ...]:
        async with self._lock:
            now = self._clock()
            if self._read_at is not None and now - self._read_at < self._refresh_s:
                return self._switches
            self._read_at = now  # a failed read is not retried before the next refresh either
            try:
                self._switches = tuple(await self._scheduler.topology())
            except SchedulerError as exc:
                log.warning("Slurm's topology could not be read (%s): the breaker keeps the switch map it had "
                            "(%d switches)", exc, len(self._switches))
            return self._switches

    async def groups(self, policy: BreakerPolicy) -> tuple[Group, ...]:
        """The switches and racks a shared drain groups nodes by: the settings' maps, Slurm's leaf
        switches where the settings name no switches (as for the breaker, limit or none)."""
        switches = tuple((g.name, g.nodes) for g in policy.switches) \
            or tuple((s.name, s.nodes) for s in leaf_switches(await self.switches()))
        return topology_groups(switches, tuple((g.name, g.nodes) for g in policy.racks))

    async def shared_drains(self, policy: BreakerPolicy, incident: str, nodes: Sequence[str],
                            observed_at: datetime | None, window_s: float) -> dict[str, SharedDrain | None]:
        """Each node's shared drain (None: the incident's own reason) in the fault this worker holds
        open for its switch or rack (goodput.recover.shared_fault.join_fault)."""
        if window_s <= 0 or observed_at is None:
            return dict.fromkeys(nodes)
        groups = await self.groups(policy)
        drains: dict[str, SharedDrain | None] = {}
        for node in nodes:  # no await in between: two isolates of one worker cannot open two faults
            drains[node], fault = join_fault(self._faults, groups, node, incident, observed_at, window_s)
            if fault is not None:
                self._faults[fault.group] = fault
        return drains

    async def applied(self, policy: BreakerPolicy) -> BreakerPolicy:
        """`policy` with Slurm's switches where it limits drains per switch and configures no map."""
        if policy.switches or policy.max_drains_per_switch <= 0:
            return policy
        return with_slurm_switches(policy, await self.switches())
