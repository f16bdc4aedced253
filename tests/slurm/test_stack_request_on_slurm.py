"""A stack request end to end on the Slurm lab: a real job that registered faulthandler and asked for
the dump signal in its comment is dumped through the agent's heartbeat channel, and lives on.

The service's half (the request table, the heartbeat endpoint with /v1/stacks on loopback, the
`capture_stacks` activity reading the job from Slurm) and the agent's half (its heartbeat loop, the
stack responder, the real capture: `scontrol listpids` for its own node, SigCgt, the signal) run
in-process. Only the rank that registered the handler is signalled (the batch shell and srun do
not catch SIGUSR1), its dump appears in the job's output, and the job is still running after.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.heartbeat import HeartbeatSender
from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.stack_agent import StackResponder
from activities.adapters.stack_dump import StackDumper
from activities.stack_requests import StackActivities
from goodput.detect.node_liveness import LivenessConfig, LivenessTracker, heartbeat_token
from goodput.detect.stack_requests import StackCaptureInput, StackRequestTable
from goodput.scheduler import JobState
from workers.liveness import HeartbeatServer

from .conftest import Lab
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]
SECRET = b"s" * 32

RANK = """\
import faulthandler, signal, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
print("ready", flush=True)


def wait_in_all_reduce():
    while True:
        time.sleep(0.2)


wait_in_all_reduce()
"""


async def test_the_agent_dumps_a_lab_job_that_asked_for_the_signal_and_the_job_lives_on(
        lab: Lab, tmp_path: Path) -> None:
    # broke/before: nothing took a request to the agent (no stack request table, no /v1/stacks),
    # and the capture asked `scontrol listpids J` without the node: on the lab's shared host it
    # answered "JobId=J does not exist on node (null)" and dumped nothing.
    tmp_path.chmod(0o755)
    rank = tmp_path / "rank.py"
    rank.write_text(RANK)
    out = tmp_path / "out.log"
    job_id = lab.sbatch(f"--output={out}", f"--chdir={tmp_path}", "--nodelist=node2",
                        "--comment=goodput:opt-in goodput:stack-signal=USR1", "--wrap",
                        f"srun {sys.executable} {rank}")
    await eventually(lambda: out.read_text() if out.exists() else "", lambda t: "ready" in t, timeout=60,
                     what="the job's rank to register faulthandler")
    cluster = "lab"
    table = StackRequestTable(ttl_s=90)
    server = HeartbeatServer(LivenessConfig(enabled=True, port=0), LivenessTracker(LivenessConfig()), cluster,
                             SECRET, stacks=table)
    await server.start()
    token = heartbeat_token(SECRET, cluster, "node2")
    responder = StackResponder(server.url, token, cluster=cluster, node="node2",
                               capture=StackDumper(py_spy=None, node="node2").capture)
    sender = HeartbeatSender(server.url, token, cluster=cluster, node="node2", interval_s=0.2,
                             on_response=responder.take)
    stop = asyncio.Event()
    beats = asyncio.create_task(sender.run(stop))
    backend = SlurmCliBackend()
    try:
        found = await ActivityEnvironment().run(
            StackActivities(backend, table, wait_s=45).capture_stacks,
            StackCaptureInput(incident_id="lab-stacks", job_id=job_id))
    finally:
        stop.set()
        await beats
        await responder.close()
        await server.stop()
    assert found.asked == ("node2",) and found.note == ""
    line = found.evidence.lines[0]
    assert line.startswith("node2: sent SIGUSR1 to 1 process(es)"), line
    assert "does not catch the dump signal" in line  # the batch shell and srun were left alone
    await eventually(lambda: out.read_text(), lambda t: "most recent call first" in t and "wait_in_all_reduce" in t,
                     timeout=30, what="the rank's faulthandler dump in the job's output")
    assert (await backend.get_job(job_id)).state is JobState.RUNNING
    with contextlib.suppress(Exception):
        lab.run("scancel", job_id, check=False)
