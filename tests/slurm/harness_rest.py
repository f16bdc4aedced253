"""The contract suite's slurmrestd cells: with a CLI fallback (22.05) and without one (24.11, 26.05).

Beside tests/slurm/harness.py (the other backends' harnesses), which these extend: the lab's CLI
only arranges what a test needs; the backend under test is SlurmRestBackend.
"""

from __future__ import annotations

import pytest

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_rest import SlurmRestBackend
from goodput.scheduler import JobInfo, PermanentSchedulerError
from goodput.slurm import restapi

from .conftest import Lab, Restd
from .harness import KEY, MARKER, POOL, SlurmCliHarness


class SlurmRestHarness(SlurmCliHarness):
    """slurmrestd (JWT) for what its API version offers, the local CLI for the rest."""

    name = "slurm-rest"

    def __init__(self, lab: Lab, restd: Restd) -> None:
        super().__init__(lab)
        self.requests: list[tuple[str, str]] = []
        self.rest = SlurmRestBackend(restd.url, user=restd.user, token=restd.token, allow_http=True,  # loopback
                                     fallback=SlurmCliBackend(self.runner, resubmit_key=KEY),
                                     on_request=lambda method, path: self.requests.append((method, path)))
        self.backend = self.rest

    def side_effects(self) -> int:
        return len(self.requests) + len(self.runner.argvs)


class SlurmRestNativeHarness(SlurmCliHarness):
    """slurmrestd alone, no fallback: every operation its API version offers goes over REST, and
    one it lacks fails with PermanentSchedulerError instead of quietly running a command (the
    version-matrix cells `slurm-rest-24.11`, `slurm-rest-26.05`). The lab's CLI only arranges tests."""

    name = "slurm-rest-native"
    # operation -> the capability it needs, and why it is missing where it is
    NEEDS = {"requeue": (restapi.Capability.JOB_REQUEUE,
                         "slurmrestd {v} has no job requeue (v0.0.45, Slurm 26.05, has)"),
             "exclude": (restapi.Capability.JOB_EXCLUDE, "slurmrestd {v} cannot update excluded nodes")}

    def __init__(self, lab: Lab, restd: Restd) -> None:
        super().__init__(lab)
        self.requests: list[tuple[str, str]] = []
        self.rest = SlurmRestBackend(restd.url, user=restd.user, token=restd.token, allow_http=True,  # loopback
                                     fallback=None,
                                     on_request=lambda method, path: self.requests.append((method, path)))
        self.backend = self.rest

    async def lacks(self, operation: str) -> str | None:
        if operation == "resubmit":
            return ("slurmrestd submits as the token's user, not as the job's owner: resubmission needs the "
                    "CLI or SSH fallback")
        if operation == "reservation":
            # and it says so, rather than acting some other way
            with pytest.raises(PermanentSchedulerError, match="fallback"):
                await self.rest.get_reservation(POOL)
            version = await self.rest.api_version()
            offered = ("has reservation updates (v0.0.43+), but goodput does not speak its reservation "
                       "endpoints yet" if version >= "v0.0.43" else "updates no reservation (v0.0.43+ does)")
            return (f"the REST backend reads and updates the spare reservation through its CLI/SSH fallback; "
                    f"slurmrestd {version} {offered}")
        need = self.NEEDS.get(operation)
        version = await self.rest.api_version()
        if need is None or await self.rest.can(need[0]):
            return None
        # and it says so, rather than acting some other way
        job = await self.running_job()
        with pytest.raises(PermanentSchedulerError, match="fallback"):
            await (self.rest.requeue_job(job.job_id) if operation == "requeue"
                   else self.rest.exclude_nodes(job.job_id, [self.node_names[3]]))
        return need[1].format(v=version)

    async def held_submission(self) -> JobInfo:
        job_id = self.lab.sbatch(f"--comment={MARKER}", "--hold", "--requeue", "--output=/dev/null",
                                 "--wrap", "sleep 300")
        return await self.backend.get_job(job_id)

    def side_effects(self) -> int:
        return len(self.requests) + len(self.runner.argvs)
