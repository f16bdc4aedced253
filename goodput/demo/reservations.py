"""The fake scheduler's reservations: the hot-spare pool as slurmctld keeps it, in memory.

Kept apart from goodput.demo.scheduler and goodput.demo.cluster so those stay about jobs and
nodes. The rules are the lab's (Slurm 22.05, checked there): a job may be pointed at a reservation
only once its owner is one of the reservation's users ("Access denied to requested reservation");
adding a user twice changes nothing; a reserved node runs only jobs of its reservation, and with
Flags=FLEX such a job may use other free nodes too (`placeable`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from goodput.identifiers import validate_job_id, validate_node_name, validate_reservation
from goodput.scheduler import (
    ActionResult,
    JobInfo,
    PermanentSchedulerError,
    ReservationInfo,
    UnknownReservationError,
)
from goodput.slurm.submit_as import validate_user_name

if TYPE_CHECKING:
    from goodput.demo.cluster import FakeClusterState, JournalEntry

T = TypeVar("T")


def placeable(s: FakeClusterState, job_id: str | None, nodes: Sequence[str]) -> list[str]:
    """The nodes among `nodes` that job `job_id` may run on, its reservation's first."""
    own = s.job_reservations.get(job_id or "")
    reserved = {n for r in s.reservations.values() if r.name != own for n in r.nodes}
    mine = [n for n in nodes if own and n in s.reservations[own].nodes]
    flex = own is None or "FLEX" in s.reservations[own].flags
    others = [n for n in nodes if n not in reserved and n not in mine] if flex else []
    return [*mine, *others]


def _reservation(s: FakeClusterState, name: str) -> ReservationInfo:
    try:
        return s.reservations[name]
    except KeyError:
        raise UnknownReservationError(f"reservation {name} not found") from None


class FakeReservations:
    """Mixed into FakeScheduler, which provides `_read`, `_opted_in` and the state."""

    def _read(self, fn: Callable[[FakeClusterState], T]) -> T:
        raise NotImplementedError

    def _opted_in(self, job: JobInfo) -> JobInfo:
        raise NotImplementedError

    def add_reservation(self, reservation: ReservationInfo) -> None:
        """Test and demo helper: what an operator's `scontrol create reservation` does."""
        def apply(s: FakeClusterState) -> None:
            s.reservations[reservation.name] = reservation
        self._read(apply)

    async def get_reservation(self, name: str) -> ReservationInfo:
        validate_reservation(name)
        return self._read(lambda s: _reservation(s, name))

    async def allow_reservation_user(self, name: str, user: str) -> ActionResult:
        validate_reservation(name)
        validate_user_name(user)

        def apply(s: FakeClusterState) -> ActionResult:
            reservation = _reservation(s, name)
            if user in reservation.users:
                return ActionResult(changed=False, detail=f"{user} may already use reservation {name}")
            s.reservations[name] = reservation.model_copy(update={"users": (*reservation.users, user)})
            s.journal.append(_entry("reservation-user", name, user))
            return ActionResult(changed=True, detail=f"allowed {user} into reservation {name}")

        return self._read(apply)

    async def disallow_reservation_user(self, name: str, user: str) -> ActionResult:
        validate_reservation(name)
        validate_user_name(user)

        def apply(s: FakeClusterState) -> ActionResult:
            reservation = _reservation(s, name)
            if user not in reservation.users:
                return ActionResult(changed=False, detail=f"{user} may not use reservation {name}")
            s.reservations[name] = reservation.model_copy(
                update={"users": tuple(u for u in reservation.users if u != user)})
            s.journal.append(_entry("reservation-user-removed", name, user))
            return ActionResult(changed=True, detail=f"removed {user} from reservation {name}")

        return self._read(apply)

    async def use_reservation(self, job_id: str, name: str) -> ActionResult:
        validate_job_id(job_id)
        validate_reservation(name)

        def apply(s: FakeClusterState) -> ActionResult:
            job = self._opted_in(_job_of(s, job_id))
            if job.user not in _reservation(s, name).users:
                raise PermanentSchedulerError(f"Access denied to requested reservation for job {job_id}")
            s.job_reservations[job_id] = name
            # and the job's record says so, as Slurm's `Reservation=` / `resv_name` does
            s.jobs[job_id] = job.model_copy(update={"reservation": name})
            s.journal.append(_entry("use-reservation", job_id, name))
            return ActionResult(changed=True, detail=f"job {job_id} may start in reservation {name}")

        return self._read(apply)

    async def add_reservation_nodes(self, name: str, nodes: Sequence[str]) -> ActionResult:
        validate_reservation(name)
        names = [validate_node_name(n) for n in nodes]

        def apply(s: FakeClusterState) -> ActionResult:
            reservation = _reservation(s, name)
            new = [n for n in dict.fromkeys(names) if n not in reservation.nodes]
            if not new:
                return ActionResult(changed=False, detail=f"reservation {name} already holds {','.join(names)}")
            s.reservations[name] = reservation.model_copy(update={"nodes": (*reservation.nodes, *new)})
            s.journal.append(_entry("reservation-nodes", name, ",".join(new)))
            return ActionResult(changed=True, detail=f"added {','.join(new)} to reservation {name}")

        return self._read(apply)


def _job_of(s: FakeClusterState, job_id: str) -> JobInfo:
    from goodput.demo.cluster import job_in  # the fake's own lookup (its UnknownJobError); lazy: cluster imports us

    return job_in(s, job_id)


def _entry(op: str, target: str, detail: str) -> JournalEntry:
    from goodput.demo.cluster import JournalEntry  # lazy: cluster imports this module

    return JournalEntry(op=op, target=target, detail=detail)
