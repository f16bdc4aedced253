"""Record the Temporal history of a full autonomous recovery for the replay test.

Run after a deliberate change to RecoveryWorkflow's command sequence (and keep the old history
too if running incidents must survive the upgrade: then the change needs `workflow.patched`):

    .venv/bin/python scripts/record_history.py tests/workflows/histories/<name>.json

`--hang` records a hang incident instead, whose attribution names nobody, on a worker whose agents'
heartbeat endpoint is on and no agent answers: it takes `hang-stack-capture` (the stack request
waits its 1 s bound and the incident goes on). `--crash` records an NCCL-timeout crash that names
no node, the storm's straight path: under `fewer-steps` it attributes in a local activity and asks
the node memory and the track record in one round trip. `--expedite` records the recovery of a job
Slurm (25.11+) requeued itself and holds (expedited requeue): it takes `release-expedited-hold`.
`--retry` records that crash with the controller down for the first two job reads: the local
`attribute` fails twice and the workflow retries it itself, taking `local-step-retries`.
`--straggler` records a straggler named while its job runs (the exclusion pends, the job runs on),
then the job's failure on another node folded into the same incident, requeued with both nodes
excluded: it takes `straggler-pends-exclusion`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from goodput.demo.scheduler import FakeScheduler
from goodput.detect.stack_requests import StackRequestTable
from goodput.models import AnomalyKind, Category, Mode
from goodput.recover.lifecycle import IncidentState
from goodput.scheduler import JobState
from tests.fakes.flaky_scheduler import ControllerDownAtFirst
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import FAST, anomaly, held_by_slurm, inject, result, running_worker, wait_for_state
from tests.workflows.test_straggler_pends import POLICY, slow_node2, xid_on_node1
from workers import devserver
from workers.liveness_worker import build_liveness_worker
from workers.worker import build_worker
from workflows import search


async def record(out: Path, hang: bool = False, crash: bool = False, expedite: bool = False,
                 retry: bool = False, straggler: bool = False) -> None:
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=devserver.temporal_binary(),
        search_attributes=list(search.ALL_KEYS))
    try:
        queue = f"record-{uuid.uuid4().hex[:8]}"
        if hang:
            table = StackRequestTable(ttl_s=30)
            worker = build_worker(env.client, queue, FakeScheduler(), RecordingNotifier(), stacks=table,
                                  stack_wait_s=1, liveness_here=True)
            # The liveness queue's worker too, as `goodput up` runs it: the request goes there.
            liveness = build_liveness_worker(env.client, queue, FakeScheduler(), stacks=table, gpu_samples=None,
                                             stack_wait_s=1)
            async with worker, liveness:
                found = anomaly(cluster="replay", kind=AnomalyKind.HANG, category=Category.HANG, nodes=())
                incident = await inject(env.client, queue, found, FAST, Mode.AUTONOMOUS)
                report = await result(env.client, incident)
        elif straggler:
            async with running_worker(env.client, queue) as fake:
                incident = await inject(env.client, queue, slow_node2("replay"), POLICY, Mode.AUTONOMOUS)
                await wait_for_state(env.client, incident, IncidentState.PENDING_EXCLUSION)
                fake.set_job_state("1001", JobState.FAILED)
                await inject(env.client, queue, xid_on_node1("replay"), POLICY, Mode.AUTONOMOUS)
                report = await result(env.client, incident)
        else:
            found = (anomaly(cluster="replay", kind=AnomalyKind.CRASH, category=Category.NCCL_TIMEOUT, nodes=())
                     if crash or retry else anomaly(cluster="replay"))
            fake = await held_by_slurm() if expedite else ControllerDownAtFirst(failures=2) if retry else None
            async with running_worker(env.client, queue, fake):
                incident = await inject(env.client, queue, found, FAST, Mode.AUTONOMOUS)
                report = await result(env.client, incident)
        history = await env.client.get_workflow_handle(incident).fetch_history()
        out.write_text(history.to_json())
        print(f"{incident}: {report.state}, {len(history.events)} events -> {out}")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record(Path(sys.argv[1]), hang="--hang" in sys.argv[2:], crash="--crash" in sys.argv[2:],
                       expedite="--expedite" in sys.argv[2:], retry="--retry" in sys.argv[2:],
                       straggler="--straggler" in sys.argv[2:]))
    sys.stdout.flush()
    os._exit(0)  # short-lived SDK clients can abort at interpreter exit (sdk-python#300)
