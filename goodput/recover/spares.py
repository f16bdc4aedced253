"""Hot spares: a pool of healthy nodes held in a Slurm reservation for recoveries.

A job restarted after a failure otherwise queues behind everyone else for nodes, and on a full
cluster that wait is the largest part of its time to progress. With `[policy.spares]` set, the
operator holds a few healthy nodes in a reservation (with Flags=FLEX, so a job bigger than the
pool takes the spares plus any free nodes); when goodput restarts a job it lets the job's owner
into the reservation and points the job at it, so it starts on a spare at once. That access is
the recovery's, not the owner's: it is taken back when the recovery ends (recovered, escalated or
cancelled), unless the operator had listed the owner already, since one forged fault line in
one's own job must not buy the spares for good. When nodes goodput drained pass their health
check and return to service, they refill the pool up to its target size. These decisions are
pure; activities.spares carries them out.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pydantic import Field, field_validator

from goodput.identifiers import validate_partition, validate_reservation
from goodput.models import Frozen
from goodput.scheduler import JobInfo, NodeInfo, ReservationInfo

# Node states in which a spare can take a job now (Slurm's base states; flags are checked apart).
READY_STATES = frozenset({"IDLE", "MIXED"})
NOT_READY_FLAGS = frozenset({"DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN",
                             "REBOOT_REQUESTED", "MAINTENANCE", "COMPLETING"})


class SparePolicy(Frozen):
    """`[policy.spares]`: off until the site names the reservation holding its spare nodes."""

    # The operator-created reservation (Flags=FLEX) holding the spares; empty: no pool.
    reservation: str = ""
    # Nodes returned to service refill the pool until it holds this many; 0: never refilled.
    target_size: int = Field(default=0, ge=0, le=10_000)
    # Partitions whose jobs may use the pool; empty: every partition.
    partitions: tuple[str, ...] = ()

    @field_validator("reservation")
    @classmethod
    def _reservation(cls, value: str) -> str:
        return validate_reservation(value) if value else value

    @field_validator("partitions")
    @classmethod
    def _partitions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(validate_partition(p) for p in value)

    @property
    def enabled(self) -> bool:
        return bool(self.reservation)

    def applies_to(self, partition: str) -> bool:
        return self.enabled and (not self.partitions or partition in self.partitions)


class PoolChoice(Frozen):
    """Whether a restarted job goes to the pool, and what the incident says about it."""

    use: bool
    pool: str = ""
    free: tuple[str, ...] = ()
    note: str = ""


def ready(node: NodeInfo) -> bool:
    base = node.state.upper().split("+")[0]
    flags = {f.upper() for f in node.flags} | set(node.state.upper().split("+")[1:])
    return base in READY_STATES and not node.drained and not flags & NOT_READY_FLAGS


def choose_pool(policy: SparePolicy, job: JobInfo, reservation: ReservationInfo, nodes: Sequence[NodeInfo],
                exclude: Collection[str]) -> PoolChoice:
    """Use the pool when one of its nodes can take the job now; otherwise queue as before."""
    name = policy.reservation
    if job.reservation and job.reservation != name:
        # Moving it would drop a constraint its owner set (a dedicated or maintenance reservation).
        return PoolChoice(use=False, pool=name, note=f"the job runs in its own reservation {job.reservation}: "
                                                     f"pool {name} not used, queued normally")
    if "FLEX" not in {f.upper() for f in reservation.flags}:
        return PoolChoice(use=False, pool=name, note=f"pool {name} is not Flags=FLEX (a job could not also use "
                                                     "nodes outside it): not used, queued normally")
    avoid = {*exclude, *job.excluded_nodes}
    members = set(reservation.nodes)
    free = tuple(sorted(n.name for n in nodes if n.name in members and n.name not in avoid and ready(n)))
    if not free:
        return PoolChoice(use=False, pool=name, note=f"pool {name} empty ({len(members)} node(s), none free): "
                                                     "queued normally")
    return PoolChoice(use=True, pool=name, free=free)


def refill_needed(policy: SparePolicy, reservation: ReservationInfo, node: str) -> str | None:
    """None when `node` (just back in service) should join the pool, else why it does not."""
    if node in reservation.nodes:
        return f"{node} is already in pool {reservation.name}"
    if len(reservation.nodes) >= policy.target_size:
        return (f"pool {reservation.name} holds {len(reservation.nodes)} of its target {policy.target_size}: "
                f"{node} stays in general service")
    return None


def spare_outcome(pool: str, offered: Sequence[str], running_on: Sequence[str]) -> str:
    """The timeline's line once the restarted job runs: on a spare, or not."""
    spares = [n for n in running_on if n in offered]
    if spares:
        return f"restarted on hot spare {','.join(spares)} from pool {pool}"
    return f"pool {pool} offered {','.join(offered)}, but the job runs on {','.join(running_on) or '?'}"


class SpareGrant(Frozen):
    """One recovery's access to the pool for the job's owner; ended with the recovery."""

    pool: str
    user: str


class PoolAccess(Frozen):
    """Whether the owner could use the pool before this recovery let them in (then it is not ours to end)."""

    listed: bool
    detail: str = ""


class GrantEnded(Frozen):
    changed: bool
    detail: str


class RefillInput(Frozen):
    """A node just returned to service, offered to the pool (workflows.node_health)."""

    cluster: str
    node: str
    policy: SparePolicy


class RefillResult(Frozen):
    added: bool
    detail: str
