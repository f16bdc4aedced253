"""One way per backend to arrange a contract test: a running opted-in job, an admin's drain.

The contract tests speak only the Scheduler Protocol; what differs between backends (creating a
job, draining a node behind goodput's back, waiting for Slurm to catch up) lives here; the
slurmrestd cells' harnesses are in harness_rest.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_owner import OwnerSubmission
from activities.adapters.slurm_pyslurm import PyslurmBackend
from activities.adapters.slurm_runner import ChrootRunner, CommandResult, CommandRunner, LocalRunner
from activities.adapters.slurm_ssh import SshRunner
from goodput.demo.scheduler import FakeClusterState, FakeScheduler
from goodput.scheduler import (
    JobInfo,
    JobState,
    NodeInfo,
    ReservationInfo,
    ResubmitRequest,
    Scheduler,
)
from goodput.slurm.reservations import parse_reservation
from goodput.slurm.resubmit import ResubmitKey
from tests.fakes.pyslurm_standin import Slurmctld
from tests.helpers import eventually as eventually  # the slurm tests' one poll, re-exported
from tests.workflows.test_watchers import workflow_exists
from workflows.watch import job_watch_id

from .conftest import Lab, Sshd

MARKER = "goodput:opt-in"
# The deployment's resubmission key, known to the tests so that they can forge nothing but
# copy what a user could see: the real token of someone else's copy.
KEY = ResubmitKey(b"contract-suite-resubmit-key", "default")
MALLORY = "goodput-mallory"
MALLORY_UID = 1002  # in the in-memory backends; the lab's mallory has whatever uid useradd gave
# The operator's hot-spare reservation of the contract tests (docs/policies.md, "Hot spares"); a
# lab's reset deletes every reservation.
POOL = "goodput-contract-spares"


# A batch job that reports who it runs as and its whole environment, then keeps running.
IDENTITY_PROBE = """#!/bin/bash
echo "probe-user=$(id -un) probe-uid=$(id -u)"
env | sed 's/^/probe-env: /'
sleep 300
"""
# What slurmd and bash add to every batch job's environment, beside SLURM_* (and SLURMD_NODENAME).
BATCH_ADDED = frozenset({"ENVIRONMENT", "HOSTNAME", "PWD", "OLDPWD", "SHLVL", "TMPDIR", "_", "CUDA_VISIBLE_DEVICES",
                         "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"})


def probe_report(text: str) -> tuple[str, dict[str, str]]:
    """(user line, environment) an IDENTITY_PROBE job printed."""
    user = next((line for line in text.splitlines() if line.startswith("probe-user=")), "")
    env = dict(line.removeprefix("probe-env: ").split("=", 1) for line in text.splitlines()
               if line.startswith("probe-env: ") and "=" in line)
    return user, env


async def past_baseline(lab: Lab, client: Client, cluster: str) -> str:
    """Returns once the cluster watcher's first scan (its baseline) is done: a job that fails
    before it is history to the watcher, not news. The scan that first sees a running opted-in
    job launches its log watcher, so a sentinel job's watcher existing means at least one scan
    is done. The sentinel keeps running until the lab's reset."""
    sentinel = lab.sbatch("--comment=goodput:opt-in", "--output=/dev/null", "--wrap=sleep 600")
    await workflow_exists(client, job_watch_id(cluster, sentinel, 0), timeout_s=60)
    return sentinel


class Harness(Protocol):
    name: str
    backend: Scheduler
    node_names: Sequence[str]

    async def running_job(self, *, opted_in: bool = True) -> JobInfo: ...

    async def admin_drain(self, node: str, reason: str) -> None: ...

    async def admin_fail(self, node: str, reason: str) -> None:
        """The node set FAIL by an administrator; `admin_resume` brings it back. Not DOWN: the labs
        run ReturnToService=2, which returns a DOWN node at its slurmd's next registration."""

    async def admin_resume(self, node: str) -> None: ...

    async def others_job(self, comment: str) -> JobInfo:
        """A pending or running job of another user (goodput-mallory) carrying `comment`."""
        ...

    def side_effects(self) -> int:
        """How many commands ran (Slurm) or mutations happened (fake) so far."""
        ...

    async def dependent_job(self, dependency: str) -> JobInfo:
        """A pending opted-in job submitted with `--dependency=<dependency>`."""
        ...

    async def array_task(self) -> str:
        """The `<array id>_<task>` id of a running task of an opted-in job array."""
        ...

    async def spare_pool(self, users: Sequence[str]) -> str:
        """The operator's reservation POOL on the fourth node for `users`, Flags=FLEX, as
        `scontrol create reservation` makes it; its name."""
        ...

    async def reservation_record(self, name: str) -> ReservationInfo:
        """The reservation as the scheduler itself keeps it (the lab: the admin's `scontrol show
        reservation`), not through the backend under test."""
        ...

    async def lacks(self, operation: str) -> str | None:
        """Why this backend cannot do `operation` at all ("requeue", "exclude", "resubmit"), or
        None: a contract test of it is then not applicable (`require`), not a failure."""
        ...


async def require(harness: Harness, *operations: str) -> None:
    """Skip, naming why, when the backend lacks an operation (the compatibility table's "n/a")."""
    for operation in operations:
        reason = await harness.lacks(operation)
        if reason is not None:
            pytest.skip(f"n/a: {reason}")


async def held_job(harness: Harness, job: JobInfo) -> JobInfo:
    """A pending, held, opted-in job: a held copy of `job` where the backend resubmits, else
    (slurmrestd without a fallback) one the lab's admin submits held."""
    if await harness.lacks("resubmit") is None:
        held = await harness.backend.resubmit_job(job.job_id, ResubmitRequest(hold=True))
        assert held.new_job_id and held.new_job_id != job.job_id
        return await harness.backend.get_job(held.new_job_id)
    submit = getattr(harness, "held_submission", None)
    assert submit is not None, f"{harness.name} can neither resubmit nor submit a held job"
    result: JobInfo = await submit()
    return result


class FakeHarness:
    name = "fake"

    def __init__(self) -> None:
        nodes = {f"node{i}": NodeInfo(name=f"node{i}", state="IDLE", gres="gpu:8") for i in range(1, 5)}
        self.fake = FakeScheduler(FakeClusterState(nodes=nodes), resubmit_key=KEY)
        self.backend: Scheduler = self.fake
        self.node_names: Sequence[str] = sorted(nodes)
        self._ids = itertools.count(7000)

    async def running_job(self, *, opted_in: bool = True) -> JobInfo:
        job = JobInfo(job_id=str(next(self._ids)), name="contract", state=JobState.RUNNING,
                      partition="debug", nodes=tuple(self.node_names[:2]), requeue=True,
                      comment=MARKER if opted_in else "", command="train.sbatch", user="root", user_id=0,
                      group_id=0)
        self.fake.add_job(job)
        return job

    async def others_job(self, comment: str) -> JobInfo:
        job = JobInfo(job_id=str(next(self._ids)), name="claim", state=JobState.PENDING, partition="debug",
                      comment=comment, user=MALLORY, user_id=MALLORY_UID, group_id=MALLORY_UID)
        self.fake.add_job(job)
        return job

    async def admin_drain(self, node: str, reason: str) -> None:
        await self.fake.drain_node(node, reason)  # any reason without goodput's prefix

    async def admin_fail(self, node: str, reason: str) -> None:
        self.fake.set_node_state(node, "IDLE", flags=("FAIL",), reason=reason)

    async def admin_resume(self, node: str) -> None:
        self.fake.set_node_state(node, "IDLE")

    async def dependent_job(self, dependency: str) -> JobInfo:
        job = JobInfo(job_id=str(next(self._ids)), name="after", state=JobState.PENDING, partition="debug",
                      comment=MARKER, dependency=dependency, state_reason="Dependency", user="root", user_id=0)
        self.fake.add_job(job)
        return job

    async def array_task(self) -> str:
        task = f"{next(self._ids)}_1"
        self.fake.add_job(JobInfo(job_id=task, name="array", state=JobState.RUNNING, partition="debug",
                                  nodes=(self.node_names[0],), comment=MARKER, user="root", user_id=0))
        return task

    async def spare_pool(self, users: Sequence[str]) -> str:
        self.fake.add_reservation(ReservationInfo(name=POOL, nodes=(self.node_names[3],), users=tuple(users),
                                                  flags=("FLEX",)))
        return POOL

    async def reservation_record(self, name: str) -> ReservationInfo:
        return await self.fake.get_reservation(name)

    async def lacks(self, operation: str) -> str | None:
        return None

    def side_effects(self) -> int:
        return len(self.fake.journal())


class PyslurmHarness:
    """PyslurmBackend on goodput's in-memory pyslurm 25.11 stand-in (no lab: pyslurm cannot be
    built against the lab's Slurm 22.05); the stand-in's controller counts every RPC."""

    name = "pyslurm"

    def __init__(self) -> None:
        self.ctl = Slurmctld(users={MALLORY_UID: MALLORY})
        self.backend: Scheduler = PyslurmBackend(self.ctl.module, resubmit_key=KEY)
        self.node_names: Sequence[str] = sorted(self.ctl.nodes)

    async def running_job(self, *, opted_in: bool = True) -> JobInfo:
        desc = self.ctl.module.JobSubmitDescription(
            name="contract", nodes=2, is_requeueable=True, standard_output="/dev/null",
            gres_per_node={"gpu": 1}, script="#!/bin/sh\nsleep 300\n", comment=MARKER if opted_in else None)
        job_id = str(desc.submit())
        return await eventually(lambda: self.backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                                timeout=5, what=f"job {job_id} to run")

    async def admin_drain(self, node: str, reason: str) -> None:
        self.ctl.update_node(node, "DRAIN", reason, user="admin")

    async def admin_fail(self, node: str, reason: str) -> None:
        self.ctl.update_node(node, "FAIL", reason, user="admin")

    async def admin_resume(self, node: str) -> None:
        self.ctl.update_node(node, "RESUME", None, user="admin")

    async def others_job(self, comment: str) -> JobInfo:
        desc = self.ctl.module.JobSubmitDescription(name="claim", script="#!/bin/sh\nsleep 300\n", comment=comment,
                                                    user_id=MALLORY_UID, priority=0)
        return await self.backend.get_job(str(desc.submit()))

    def side_effects(self) -> int:
        return len(self.ctl.calls)

    async def dependent_job(self, dependency: str) -> JobInfo:
        raise AssertionError("not applicable: see lacks('dependency')")

    async def array_task(self) -> str:
        raise AssertionError("not applicable: see lacks('array')")

    async def lacks(self, operation: str) -> str | None:
        return {"exclude": "the pyslurm backend does not update excluded nodes",
                "dependency": "the pyslurm backend does not read a job's dependency",
                "array": "goodput's pyslurm stand-in cannot submit job arrays",
                "reservation": "the pyslurm backend does not read or update reservations (the hot-spare "
                               "pool needs the CLI, SSH or REST backend)"}.get(operation)


class RecordingRunner(LocalRunner):
    def __init__(self) -> None:
        super().__init__()
        self.argvs: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.argvs.append(tuple(argv))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


class RecordingChrootRunner(ChrootRunner):
    """The CLI backend's commands, run with the clients of the lab's own (newer) Slurm in its root."""

    def __init__(self, lab: Lab) -> None:
        assert lab.chroot is not None
        super().__init__(lab.chroot, env={"SLURM_CONF": str(lab.conf)})
        self.argvs: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.argvs.append(tuple(argv))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


class SlurmCliHarness:
    name = "slurm-cli"

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.runner: RecordingRunner | RecordingChrootRunner = (
            RecordingChrootRunner(lab) if lab.chroot else RecordingRunner())
        runner: CommandRunner = self.runner
        # a copy's sbatch runs with nothing of goodput's environment but what is carried: this lab's
        # SLURM_CONF (the process's own names the 22.05 lab's, or none)
        carried = OwnerSubmission(carried={"SLURM_CONF": str(lab.conf)}) if lab.chroot else None
        self.backend: Scheduler = SlurmCliBackend(runner, resubmit_key=KEY, submission=carried)
        self.node_names: Sequence[str] = [f"node{i}" for i in range(1, 5)]

    async def running_job(self, *, opted_in: bool = True) -> JobInfo:
        args = ["--nodes=2", "--requeue", "--job-name=contract", "--output=/dev/null",
                "--gres=gpu:1", "--wrap", "sleep 300"]
        if opted_in:
            args.insert(0, f"--comment={MARKER}")
        job_id = self.lab.sbatch(*args)
        return await eventually(lambda: self.backend.get_job(job_id),
                                lambda j: j.state is JobState.RUNNING, timeout=20,
                                what=f"job {job_id} to run")

    async def admin_drain(self, node: str, reason: str) -> None:
        self.lab.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    async def admin_fail(self, node: str, reason: str) -> None:
        self.lab.run("scontrol", "update", f"NodeName={node}", "State=FAIL", f"Reason={reason}")

    async def admin_resume(self, node: str) -> None:
        self.lab.run("scontrol", "update", f"NodeName={node}", "State=RESUME")

    async def others_job(self, comment: str) -> JobInfo:
        job_id = self.lab.sbatch_as(MALLORY, f"--comment={comment}", "--hold", "--output=/dev/null",
                                    script="#!/bin/sh\nsleep 300\n")
        return await self.backend.get_job(job_id)

    async def dependent_job(self, dependency: str) -> JobInfo:
        job_id = self.lab.sbatch(f"--comment={MARKER}", f"--dependency={dependency}", "--output=/dev/null",
                                 "--wrap", "sleep 300")
        return await self.backend.get_job(job_id)

    async def array_task(self) -> str:
        array = self.lab.sbatch(f"--comment={MARKER}", "--array=0-1", "--output=/dev/null", "--wrap", "sleep 300")
        task = f"{array}_1"
        await eventually(lambda: self.lab.run("squeue", "-h", "-j", task, "-o", "%T", check=False).stdout.strip(),
                         lambda state: state == "RUNNING", timeout=20, what=f"array task {task} to run")
        return task

    async def spare_pool(self, users: Sequence[str]) -> str:
        self.lab.run("scontrol", "create", "reservation", f"ReservationName={POOL}", f"Nodes={self.node_names[3]}",
                     "StartTime=now", "Duration=infinite", f"Users={','.join(users)}", "Flags=FLEX")
        return POOL

    async def reservation_record(self, name: str) -> ReservationInfo:
        return parse_reservation(self.lab.run("scontrol", "show", "reservation", "-o", name).stdout, name)

    def side_effects(self) -> int:
        return len(self.runner.argvs)

    async def lacks(self, operation: str) -> str | None:
        return None


class RecordingSshRunner(SshRunner):
    def __init__(self, lab: Lab, sshd: Sshd) -> None:
        super().__init__("127.0.0.1", port=sshd.port, username="root", known_hosts=sshd.known_hosts,
                         client_keys=[sshd.client_key], env={"SLURM_CONF": str(lab.conf)})
        self.argvs: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.argvs.append(tuple(argv))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


class RecordingChrootSshRunner(RecordingSshRunner):
    """Over SSH to this host's sshd, then the lab root's own clients (`chroot ROOT argv`): the
    SSH transport (quoting, environment, exit status and stderr) with a newer Slurm's commands."""

    def __init__(self, lab: Lab, sshd: Sshd) -> None:
        assert lab.chroot is not None
        super().__init__(lab, sshd)
        self.root = lab.chroot

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.argvs.append(tuple(argv))
        return await SshRunner.run(self, ["/usr/sbin/chroot", self.root, *argv], stdin=stdin, timeout_s=timeout_s)


class SlurmSshHarness(SlurmCliHarness):
    """The CLI backend with every command going through sshd on 127.0.0.1 as on a login node."""

    name = "slurm-ssh"

    def __init__(self, lab: Lab, sshd: Sshd) -> None:
        super().__init__(lab)
        self.ssh_runner = RecordingChrootSshRunner(lab, sshd) if lab.chroot else RecordingSshRunner(lab, sshd)
        # resubmissions run as the owner on the login node, with the login node's Slurm settings
        self.backend = SlurmCliBackend(self.ssh_runner, resubmit_key=KEY,
                                       submission=OwnerSubmission(carried=self.ssh_runner.environment))

    def side_effects(self) -> int:
        return len(self.ssh_runner.argvs)
