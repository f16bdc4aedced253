"""One way per backend to arrange a contract test: a running opted-in job, an admin's drain.

The contract tests speak only the Scheduler Protocol; what differs between backends (creating a
job, draining a node behind goodput's back, waiting for Slurm to catch up) lives here.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_pyslurm import PyslurmBackend
from activities.adapters.slurm_rest import SlurmRestBackend
from activities.adapters.slurm_runner import CommandResult, LocalRunner
from activities.adapters.slurm_ssh import SshRunner
from goodput.fakes.pyslurm_standin import Slurmctld
from goodput.fakes.scheduler import FakeClusterState, FakeScheduler
from goodput.scheduler import JobInfo, JobState, NodeInfo, Scheduler

from .conftest import Lab, Restd, Sshd

T = TypeVar("T")
MARKER = "goodput:opt-in"


async def eventually(probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], *,
                     timeout: float = 30.0, interval: float = 0.2, what: str = "condition") -> T:
    """Poll `probe` until `accept` holds; fail with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last: {value!r}")
        await asyncio.sleep(interval)


class Harness(Protocol):
    name: str
    backend: Scheduler
    node_names: Sequence[str]

    async def running_job(self, *, opted_in: bool = True) -> JobInfo: ...

    async def admin_drain(self, node: str, reason: str) -> None: ...

    def side_effects(self) -> int:
        """How many commands ran (Slurm) or mutations happened (fake) so far."""
        ...


class FakeHarness:
    name = "fake"

    def __init__(self) -> None:
        nodes = {f"node{i}": NodeInfo(name=f"node{i}", state="IDLE", gres="gpu:8") for i in range(1, 5)}
        self.fake = FakeScheduler(FakeClusterState(nodes=nodes))
        self.backend: Scheduler = self.fake
        self.node_names: Sequence[str] = sorted(nodes)
        self._ids = itertools.count(7000)

    async def running_job(self, *, opted_in: bool = True) -> JobInfo:
        job = JobInfo(job_id=str(next(self._ids)), name="contract", state=JobState.RUNNING,
                      partition="debug", nodes=tuple(self.node_names[:2]), requeue=True,
                      comment=MARKER if opted_in else "", command="train.sbatch")
        self.fake.add_job(job)
        return job

    async def admin_drain(self, node: str, reason: str) -> None:
        await self.fake.drain_node(node, reason)  # any reason without goodput's prefix

    def side_effects(self) -> int:
        return len(self.fake.journal())


class PyslurmHarness:
    """PyslurmBackend on goodput's in-memory pyslurm 25.11 stand-in (no lab: pyslurm cannot be
    built against the lab's Slurm 22.05); the stand-in's controller counts every RPC."""

    name = "pyslurm"

    def __init__(self) -> None:
        self.ctl = Slurmctld()
        self.backend: Scheduler = PyslurmBackend(self.ctl.module)
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

    def side_effects(self) -> int:
        return len(self.ctl.calls)


class RecordingRunner(LocalRunner):
    def __init__(self) -> None:
        super().__init__()
        self.argvs: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.argvs.append(tuple(argv))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


class SlurmCliHarness:
    name = "slurm-cli"

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.runner = RecordingRunner()
        self.backend: Scheduler = SlurmCliBackend(self.runner)
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

    def side_effects(self) -> int:
        return len(self.runner.argvs)


class RecordingSshRunner(SshRunner):
    def __init__(self, lab: Lab, sshd: Sshd) -> None:
        super().__init__("127.0.0.1", port=sshd.port, username="root", known_hosts=sshd.known_hosts,
                         client_keys=[sshd.client_key], env={"SLURM_CONF": str(lab.conf)})
        self.argvs: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        self.argvs.append(tuple(argv))
        return await super().run(argv, stdin=stdin, timeout_s=timeout_s)


class SlurmSshHarness(SlurmCliHarness):
    """The CLI backend with every command going through sshd on 127.0.0.1 as on a login node."""

    name = "slurm-ssh"

    def __init__(self, lab: Lab, sshd: Sshd) -> None:
        super().__init__(lab)
        self.ssh_runner = RecordingSshRunner(lab, sshd)
        self.backend = SlurmCliBackend(self.ssh_runner)

    def side_effects(self) -> int:
        return len(self.ssh_runner.argvs)


class SlurmRestHarness(SlurmCliHarness):
    """slurmrestd (JWT) for what its API version offers, the local CLI for the rest."""

    name = "slurm-rest"

    def __init__(self, lab: Lab, restd: Restd) -> None:
        super().__init__(lab)
        self.requests: list[tuple[str, str]] = []
        self.rest = SlurmRestBackend(restd.url, user=restd.user, token=restd.token,
                                     fallback=SlurmCliBackend(self.runner),
                                     on_request=lambda method, path: self.requests.append((method, path)))
        self.backend = self.rest

    def side_effects(self) -> int:
        return len(self.requests) + len(self.runner.argvs)
