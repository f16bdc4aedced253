"""What the pyslurm backend tests share: the stand-in controller, its users, a running job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from activities.adapters.slurm_owner import LocalAccounts
from activities.adapters.slurm_pyslurm import PyslurmBackend
from goodput.ownership import drain_reason
from goodput.slurm.resubmit import ResubmitKey
from goodput.slurm.submit_as import Account
from tests.fakes.pyslurm_standin import JobRecord, Slurmctld

REPO = Path(__file__).resolve().parents[2]
REASON = drain_reason("inc-1", "xid 79 on GPU 3")
SCRIPT = "#!/bin/bash\nsrun python train.py\n"
HOSTILE = ["node1;rm -rf /", "node1\nnode2", "x" * 10_000, "$(reboot)", "-h", ""]
KEY = ResubmitKey(b"unit-test-resubmit-key", "default")
# Owners that exist only in this test's account directory, never on the host running it.
ALICE = {"user_id": 1001, "user_name": "unit-alice", "group_id": 1001}
USERS = {1001: "unit-alice", 1002: "unit-mallory"}


class Accounts(LocalAccounts):
    """The worker host's passwd database: the real one, plus unit-alice."""

    def __init__(self, extra: dict[str, Account] | None = None) -> None:
        self.extra = {"unit-alice": Account(name="unit-alice", uid=1001, gid=1001, home="/home/unit-alice",
                                               shell="/bin/bash")} if extra is None else extra

    async def account(self, name: str) -> Account | None:
        return self.extra[name] if name in self.extra else await super().account(name)


def running(ctl: Slurmctld, job_id: int = 7, *, comment: str | None = "goodput:opt-in", **fields: Any) -> JobRecord:
    values: dict[str, Any] = {"name": "train", "state": "RUNNING", "nodes": ("node1", "node2"), "num_nodes": 2,
                              "is_requeueable": True, "standard_output": f"/scratch/out-{job_id}.log"}
    return ctl.add_job(JobRecord(id=job_id, script=SCRIPT, comment=comment, **(values | fields)))


def new_slurmctld() -> Slurmctld:
    """An empty stand-in controller that knows the test's users (the `ctl` fixture)."""
    return Slurmctld(users=USERS)


def new_backend(ctl: Slurmctld) -> PyslurmBackend:
    """The backend on that controller (the `backend` fixture)."""
    return PyslurmBackend(ctl.module, resubmit_key=KEY, accounts=Accounts())
