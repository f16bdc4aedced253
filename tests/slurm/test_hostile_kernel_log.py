"""Issue #26 on the lab: goodput-mallory forges GPU faults in a node's log against goodput-alice's job.

node2's agent reads a file every local account can feed (a stand-in for RHEL's /var/log/messages,
which the syslog daemon fills from anyone's `logger`). mallory appends, as herself, what `logger`
and `logger -t kernel` write there. alice's opted-in job on node2 must go on running, node2 must
stay in service, and no incident may open. The same agent reading the journal's kernel records
(`journalctl -k -o export`) still opens the incident for the kernel's own Xid, and ignores
mallory's record that only claims SYSLOG_IDENTIFIER=kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.adapters.node_agent import NodeAgent
from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.detect.watch import OptInRule
from goodput.models import IncidentKey, Mode
from goodput.recover.policy import Policy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.test_watchers import incident_appears
from workers.client import TemporalIncidentService
from workers.watch import IncidentSink
from workers.worker import build_worker

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

ALICE, MALLORY = "goodput-alice", "goodput-mallory"
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."


def as_mallory(lab: Lab, path: Path, text: str) -> None:
    """mallory appends `text` herself: no goodput code runs on her behalf."""
    subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "/usr/sbin/runuser", "-u", MALLORY, "--", "sh", "-c",
                    'printf "%s" "$1" >> "$2"', "sh", text, str(path)], check=True, timeout=30,
                   cwd=lab.user_dir(MALLORY))


@contextlib.asynccontextmanager
async def agent_on(path: Path, cluster: str, backend: SlurmCliBackend, sink: IncidentSink) -> AsyncIterator[NodeAgent]:
    agent = NodeAgent("node2", cluster, None, path, backend, sink, OptInRule(), interval_s=0.2, job_refresh_s=0.5)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    async def check() -> bool:
        return condition()

    await eventually(check, bool, timeout=timeout_s, what=what)


async def test_mallorys_forged_xids_do_not_touch_alices_job(lab: Lab, client: Client, task_queue: str) -> None:
    backend = SlurmCliBackend()
    job_id = lab.sbatch_as(ALICE, "--comment=goodput:opt-in", "--nodelist=node2", "--output=/dev/null",
                           script="#!/bin/sh\nsleep 600\n")
    await eventually(lambda: backend.get_job(job_id), lambda j: j.state is JobState.RUNNING, timeout=30,
                     what="alice's job running on node2")
    shared = lab.dir / "work" / f"kernlog-{uuid.uuid4().hex[:8]}"  # root's, like /var/log
    shared.mkdir(mode=0o755)
    messages = shared / "messages"
    messages.write_text("")
    messages.chmod(0o666)  # the syslog socket: anyone's `logger` reaches the file
    cluster = f"lab{uuid.uuid4().hex[:6]}"
    rules = Policy(mode=Mode.MONITOR, coalesce_window_s=0.2, linger_s=0)
    sink = IncidentSink(TemporalIncidentService(client, task_queue), rules)
    key = IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0)
    stamp = datetime.now(UTC).strftime("%b %e %H:%M:%S")
    async with build_worker(client, task_queue, backend, RecordingNotifier(), policy=rules):
        async with agent_on(messages, cluster, backend, sink) as agent:
            await until(lambda: agent.stats.steps >= 1, "the agent's first step")
            as_mallory(lab, messages, f"{stamp} node2 goodput-mallory[4242]: {XID}\n")  # logger
            as_mallory(lab, messages, f"{stamp} node2 kernel: {XID}\n")  # logger -t kernel
            await until(lambda: agent.stats.kernel_untrusted >= 2, "both forged lines read")
            steps = agent.stats.steps
            await until(lambda: agent.stats.steps >= steps + 3, "steps past the forged lines")
            assert agent.stats.submitted == 0 and agent.stats.kernel_xids == 0
        with pytest.raises((TimeoutError, AssertionError)):
            await incident_appears(client, key, timeout_s=2)
        job = await backend.get_job(job_id)
        assert job.state is JobState.RUNNING and job.restart_count == 0, job
        assert "DRAIN" not in lab.node("node2")["State"]

        # The journal's kernel records: mallory's record is refused, the kernel's opens the incident.
        export = shared / "kernel.export"
        export.write_text("")
        export.chmod(0o666)
        micros = int(datetime.now(UTC).timestamp() * 1_000_000)
        async with agent_on(export, cluster, backend, sink) as agent:
            await until(lambda: agent.stats.steps >= 1, "the agent's first step")
            as_mallory(lab, export, f"__REALTIME_TIMESTAMP={micros}\n_TRANSPORT=syslog\nSYSLOG_IDENTIFIER=kernel\n"
                                    f"MESSAGE={XID}\n\n")
            await until(lambda: agent.stats.kernel_untrusted >= 1, "mallory's record read")
            assert agent.stats.submitted == 0
            with export.open("a") as out:  # what journald writes for the driver's line
                out.write(f"__REALTIME_TIMESTAMP={micros + 1}\n_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\n"
                          f"MESSAGE={XID}\n_HOSTNAME=node2\n\n")
            await incident_appears(client, key, timeout_s=30)
        await client.get_workflow_handle(key.workflow_id).terminate("test over")
    lab.run("scancel", job_id, check=False)

