"""SSH mode: the connection to the login node drops while the requeue command runs; the step is
retried over a new connection and the job is requeued exactly once (slurmctld's own log).

The worst moment is made real, not simulated: slurmctld is frozen (SIGSTOP) so the remote
`scontrol requeuehold` waits on it, and then every sshd session process is killed, which drops the
TCP connection under the running command. The orphaned command still reaches the controller once
it thaws, so the requeue may well have happened when the worker hears only "connection lost": the
retry must see that and finish the job (exclude, release) instead of requeueing it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Sequence
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_runner import CommandResult
from activities.adapters.slurm_ssh import SshRunner
from goodput.models import AnomalyKind, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.scheduler import JobState
from goodput.slurm.records import split_record
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import ACTS_ALONE, anomaly, inject
from workers.worker import build_worker

from .conftest import Lab, SlurmRecords, Sshd
from .harness import eventually
from .test_chaos_on_slurm import XID, submit
from .test_controller_outage_on_slurm import controller_pid

pytestmark = [pytest.mark.slurm, pytest.mark.ssh, pytest.mark.temporal, pytest.mark.slow]

REQUEUES = (["scontrol", "requeue"], ["scontrol", "requeuehold"])


def children_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                found.append(int(entry.name))
    return found


def descendants_of(parent: int) -> list[int]:
    found, todo = [], [parent]
    while todo:
        children = children_of(todo.pop())
        found += children
        todo += children
    return found


def connected_to(pid: int, port: int) -> bool:
    """Whether process `pid` holds a TCP connection to 127.0.0.1:`port` (its sockets' inodes
    looked up in /proc/net/tcp)."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    inodes = {link[len("socket:["):-1] for link in links if link.startswith("socket:[")}
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
            return True
    return False


def requeue_waiting_on_controller(sshd_pid: int, port: int) -> bool:
    """A requeue command run over SSH has reached the controller's socket (and waits on it)."""
    for pid in descendants_of(sshd_pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:1] == [b"scontrol"] and argv[1:2] in ([b"requeue"], [b"requeuehold"]) and connected_to(pid, port):
            return True
    return False


class DropsMidRequeue(SshRunner):
    """The real SSH runner; the first requeue's connection is cut while the command waits on the
    controller, and the cut command is then seen to reach slurmctld (the job requeued)."""

    def __init__(self, lab: Lab, sshd: Sshd, *, sshd_pid: int, controller: int) -> None:
        super().__init__("127.0.0.1", port=sshd.port, username="root", known_hosts=sshd.known_hosts,
                         client_keys=[sshd.client_key], env={"SLURM_CONF": str(lab.conf)}, timeout_s=30)
        self._lab = lab
        self._sshd, self._controller = sshd_pid, controller
        port = re.search(r"^SlurmctldPort=(\d+)", lab.conf.read_text(), re.MULTILINE)
        assert port is not None, "the lab's slurm.conf names no SlurmctldPort"
        self._ctl_port = int(port.group(1))
        self.dropped: list[int] = []
        self.sent: list[list[str]] = []
        self.reached = False

    async def run(self, argv: Sequence[str], *, stdin: bytes | None = None,
                  timeout_s: float | None = None) -> CommandResult:
        if list(argv[:2]) in REQUEUES:
            self.sent.append(list(argv))
        if self.dropped or list(argv[:2]) not in REQUEUES:
            return await super().run(argv, stdin=stdin, timeout_s=timeout_s)
        os.kill(self._controller, signal.SIGSTOP)
        try:
            running = asyncio.create_task(super().run(argv, stdin=stdin, timeout_s=timeout_s))
            await eventually(lambda: asyncio.to_thread(requeue_waiting_on_controller, self._sshd, self._ctl_port),
                             bool, timeout=20, what="the requeue command on the login node, waiting for slurmctld")
            self.dropped = children_of(self._sshd)
            for session in self.dropped:
                os.kill(session, signal.SIGKILL)
        finally:
            os.kill(self._controller, signal.SIGCONT)
        # The orphaned command reaches the controller once it thaws: wait for Slurm to have
        # requeued the job, so the retry meets the worst case (requeued, connection lost) every time.
        job_id = argv[2]
        with contextlib.suppress(AssertionError):  # the test says so, not the activity
            await eventually(lambda: asyncio.to_thread(self._restarts, job_id), lambda n: n >= 1, timeout=30,
                             what=f"the cut requeue of {job_id} reaching slurmctld")
            self.reached = True
        return await running

    def _restarts(self, job_id: str) -> int:
        return int(split_record(self._lab.run("scontrol", "show", "job", "-o", job_id).stdout).get("Restarts", "0"))


@pytest.mark.timeout(240)
async def test_a_connection_dropped_mid_requeue_requeues_the_job_once(
        lab: Lab, records: SlurmRecords, sshd: Sshd, client: Client, task_queue: str, tmp_path: Path) -> None:
    sshd_pid = int((sshd.known_hosts.parent / "sshd.pid").read_text().split()[0])
    runner = DropsMidRequeue(lab, sshd, sshd_pid=sshd_pid, controller=controller_pid(lab))
    backend = SlurmCliBackend(runner)
    policy = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, coalesce_window_s=0.2, linger_s=0, verify_poll_interval_s=0.5,
                    verify_running_timeout_s=120, in_job_follow_s=0)
    try:
        job_id = submit(lab, tmp_path, "--nodes=2")
        job = await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING,
                               timeout=30, what="job to run")
        async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=policy):
            incident = await inject(client, task_queue, anomaly(job_id, kind=AnomalyKind.GPU_FAULT,
                                                                nodes=job.nodes[-1:], evidence=(XID,)),
                                    policy, Mode.AUTONOMOUS)
            handle = client.get_workflow_handle(incident, result_type=IncidentReport)
            report = await asyncio.wait_for(handle.result(), timeout=150)
        again = await backend.get_job(job_id)
    finally:
        await runner.close()
    assert runner.dropped, "no ssh session was cut"
    assert runner.reached, "the cut requeue command never reached slurmctld"
    # One requeue command was ever sent, the cut one, and Slurm recorded one requeue: it got through.
    assert [a[1] for a in runner.sent] == ["requeuehold"], runner.sent
    assert report.state is IncidentState.RECOVERED, report.timeline
    assert records.requeues(job_id) == 1
    assert again.restart_count == 1 and again.state is JobState.RUNNING and job.nodes[-1] not in again.nodes
