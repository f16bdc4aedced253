"""The CLI backend's hot-spare pool commands: a Slurm reservation read and changed with scontrol.

Split out of activities/adapters/slurm_cli.py (one concept per file, that one over 400 lines): the
pool (goodput.recover.spares) is a reservation whose users and nodes goodput edits, each change
read first so that a retried activity finds it made. `SlurmCliBackend` inherits these and
supplies how a command runs and how a job is read.
"""

from __future__ import annotations

from collections.abc import Sequence

from activities.adapters.slurm_runner import CommandResult
from goodput.identifiers import validate_node_name, validate_reservation
from goodput.scheduler import ActionResult, JobInfo, ReservationInfo, UnknownReservationError
from goodput.slurm import commands
from goodput.slurm.errors import classify
from goodput.slurm.reservations import parse_reservation
from goodput.slurm.submit_as import validate_user_name


class SlurmReservations:
    """The reservation half of `goodput.scheduler.Scheduler` over scontrol."""

    async def _try(self, argv: Sequence[str], *, stdin: bytes | None = None) -> CommandResult:
        raise NotImplementedError

    async def _run(self, argv: Sequence[str], *, stdin: bytes | None = None) -> CommandResult:
        raise NotImplementedError

    async def _opted_in_job(self, job_id: str) -> JobInfo:
        raise NotImplementedError

    async def get_reservation(self, name: str) -> ReservationInfo:
        result = await self._try(commands.show_reservation(name))
        if not result.ok and "not found" in f"{result.stdout} {result.stderr}".lower():
            raise UnknownReservationError(f"reservation {name} not found")
        if not result.ok:
            raise classify(result.argv, result.returncode, result.stdout, result.stderr)
        return parse_reservation(result.stdout, name)

    async def allow_reservation_user(self, name: str, user: str) -> ActionResult:
        validate_reservation(name)
        validate_user_name(user)
        if user in (await self.get_reservation(name)).users:
            return ActionResult(changed=False, detail=f"{user} may already use reservation {name}")
        await self._run(commands.reservation_add_user(name, user))
        return ActionResult(changed=True, detail=f"allowed {user} into reservation {name}")

    async def disallow_reservation_user(self, name: str, user: str) -> ActionResult:
        validate_reservation(name)
        validate_user_name(user)
        if user not in (await self.get_reservation(name)).users:
            return ActionResult(changed=False, detail=f"{user} may not use reservation {name}")
        await self._run(commands.reservation_remove_user(name, user))
        return ActionResult(changed=True, detail=f"removed {user} from reservation {name}")

    async def use_reservation(self, job_id: str, name: str) -> ActionResult:
        validate_reservation(name)
        await self._opted_in_job(job_id)
        await self._run(commands.job_reservation(job_id, name))
        return ActionResult(changed=True, detail=f"job {job_id} may start in reservation {name}")

    async def add_reservation_nodes(self, name: str, nodes: Sequence[str]) -> ActionResult:
        names = [validate_node_name(n) for n in nodes]
        current = (await self.get_reservation(name)).nodes
        new = [n for n in dict.fromkeys(names) if n not in current]
        if not new:
            return ActionResult(changed=False, detail=f"reservation {name} already holds {','.join(names)}")
        # No compare-and-set: the list is read and written back in one round trip.
        await self._run(commands.reservation_nodes(name, [*current, *new]))
        return ActionResult(changed=True, detail=f"added {','.join(new)} to reservation {name}")
