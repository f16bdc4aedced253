"""The agents' in-memory stores reach incidents handled by any worker, as the Helm chart runs them.

The chart runs `[liveness]` in its own pod: the stack request table and the GPU sample store live
in that process only, while hang incidents, watchers and the push receiver run on other pods. On
the real Temporal dev server, a worker pod without the stores and a liveness pod with them poll the
same task queue: every hang incident must get the agents' stacks whichever worker runs it, a hang
submitted from the worker pod must carry the GPUs' evidence, and with no liveness process at all
an incident says so at once instead of waiting out a bound.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from activities.adapters.liveness_queue import TemporalLivenessPresence
from activities.adapters.stack_dump import StackReport
from goodput.config import Settings
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.detect.gpu_feed import GpuSampleStore
from goodput.detect.node_liveness import LivenessConfig, LivenessTracker
from goodput.detect.stack_requests import StackRequestTable
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, CulpritKind, IncidentKey, Mode
from tests.fakes.notifier import RecordingNotifier
from tests.helpers import eventually
from tests.workflows.helpers import FAST, inject, result, wait_for_state
from tests.workflows.test_gpu_evidence import NODES, gpus
from tests.workflows.test_hang_stacks import DUMPS, PAST_ATTRIBUTION, SECRET, agents, details, hang
from workers.gpu_feed import evidence_sink, gpu_store_for
from workers.liveness import HeartbeatServer
from workers.liveness_worker import RemoteGpuExplainer, build_liveness_worker
from workers.serve import stack_table_for
from workers.worker import build_worker, liveness_worker_for

pytestmark = pytest.mark.temporal
JOBS = ("3001", "3002", "3003", "3004", "3005", "3006")


def scheduler() -> FakeScheduler:
    fake = FakeScheduler(demo_cluster(node_count=8))
    template = fake.snapshot().jobs["1001"]
    for job in JOBS:  # hung jobs on the nodes whose dumps show pid 22 outside the collective
        fake.add_job(template.model_copy(update={"job_id": job}))
    fake.add_job(fake.snapshot().jobs["1002"].model_copy(update={"job_id": "2001", "nodes": NODES}))
    return fake


async def liveness_pod_polls(client: Client, task_queue: str) -> None:
    """Temporal lists the liveness pod once it has polled (a pod just started is not yet served). A
    describe call that a loaded dev server did not answer in time says nothing yet: ask again."""
    presence = TemporalLivenessPresence(client, task_queue, cache_s=0)

    async def served() -> bool:
        try:
            return await presence.served()
        except RPCError:
            return False

    await eventually(served, bool, timeout=20, what=f"a poller on {presence.queue}")

@asynccontextmanager
async def worker_pod(client: Client, task_queue: str, fake: FakeScheduler) -> AsyncIterator[None]:
    """The chart's `worker` Deployment: `goodput worker` with liveness off, so no stores."""
    async with build_worker(client, task_queue, fake, RecordingNotifier(), fail_workflows_on_bugs=True):
        yield


@asynccontextmanager
async def liveness_pod(client: Client, task_queue: str, cluster: str, fake: FakeScheduler, *,
                       store: GpuSampleStore | None = None, wait_s: float = 20) -> AsyncIterator[HeartbeatServer]:
    """The chart's `liveness` Deployment: a worker on the shared queue like any other, the heartbeat
    endpoint and the stores it fills (the test fills `store` itself, as the GPU feed would)."""
    # Its own connection, as its own pod has: one client may not run two workers on one queue.
    client = await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                                  data_converter=client.data_converter)
    table = StackRequestTable(ttl_s=wait_s + 30)
    server = HeartbeatServer(LivenessConfig(enabled=True, port=0), LivenessTracker(LivenessConfig()), cluster,
                             SECRET, stacks=table)
    async with AsyncExitStack() as stack:
        await server.start()
        stack.push_async_callback(server.stop)
        await stack.enter_async_context(build_worker(
            client, task_queue, fake, RecordingNotifier(), fail_workflows_on_bugs=True, stacks=table,
            stack_wait_s=wait_s, gpu_samples=store))
        await stack.enter_async_context(build_liveness_worker(
            client, task_queue, fake, stacks=table, stack_wait_s=wait_s, gpu_samples=store))
        yield server


async def test_every_hang_gets_the_agents_stacks_whichever_pod_runs_it(client: Client, task_queue: str) -> None:
    # Six incidents: before the fix each one's capture ran on whichever pod polled first, and the
    # worker pod's answer was "the heartbeat endpoint is not enabled".
    cluster = f"lq{os.getpid()}a"
    fake = scheduler()
    async with worker_pod(client, task_queue, fake), liveness_pod(client, task_queue, cluster, fake) as server, \
            agents(server, cluster, lambda node, job: StackReport(job, dumps=DUMPS[node]), "node1", "node2"):
        await liveness_pod_polls(client, task_queue)
        incidents = [await inject(client, task_queue, hang(cluster).model_copy(update={"job_id": job}), FAST)
                     for job in JOBS]
        reports = [await wait_for_state(client, i, *PAST_ATTRIBUTION, timeout_s=60) for i in incidents]
    missed = [details(r) for r in reports
              if r.attribution is None or (CulpritKind.RANK, "pid 22 on node2") not in
              [(c.kind, c.id) for c in r.attribution.culprits]]
    assert not missed, f"{len(missed)} of {len(JOBS)} without the stacks' culprit: {missed[0]}"


async def test_a_hang_from_the_worker_pod_carries_the_gpus_evidence(client: Client, task_queue: str) -> None:
    # Before the fix the worker pod's sink had no store to read (build_worker wrapped it only when
    # it held one), so the hang reached the incident with no GPU named.
    cluster = f"lq{os.getpid()}b"
    fake = scheduler()
    now = datetime.now(UTC)
    store = GpuSampleStore(window=12, max_age_s=120, max_nodes=16)
    for r in range(6):
        at = now - timedelta(seconds=10 * (5 - r))
        for node in NODES:
            store.put(node, at, [g.sample(node, at) for g in gpus(node, hung=r >= 3)])
    policy = FAST.model_copy(update={"mode": Mode.AUTONOMOUS})
    hang_2001 = Anomaly(id="log-hang-2001", source=AnomalySource.LOG, kind=AnomalyKind.HANG, cluster=cluster,
                        job_id="2001", evidence=["no progress for 75 s (10 x p99 of the step interval)"],
                        category=Category.HANG, observed_at=now, detected_at=now)
    async with worker_pod(client, task_queue, fake), liveness_pod(client, task_queue, cluster, fake, store=store):
        await liveness_pod_polls(client, task_queue)
        # What the worker pod's watchers and the detectors pod's receivers submit through.
        sink = evidence_sink(client, task_queue, policy, fake, gpu_samples=None)
        await sink.submit(hang_2001)
        report = await result(client, IncidentKey(cluster=cluster, job_id="2001", job_attempt=0).workflow_id)
    assert (sink.explained, sink.errors) == (1, 0)
    (seen,) = report.anomalies
    assert seen.nodes == ("node3",) and seen.gpus == ("GPU-node3-1",), seen
    assert any("dropped out of the collective" in e for e in seen.evidence), seen.evidence


async def test_with_no_liveness_process_a_hang_says_so_and_goes_on(client: Client, task_queue: str) -> None:
    # The route is asked once; with nobody polling the liveness queue nothing is scheduled there,
    # so no incident waits out a schedule-to-start bound it could never meet.
    cluster = f"lq{os.getpid()}c"
    fake = scheduler()
    async with worker_pod(client, task_queue, fake):
        incident = await inject(client, task_queue, hang(cluster), FAST)
        report = await wait_for_state(client, incident, *PAST_ATTRIBUTION, timeout_s=40)
    text = details(report)
    assert f"no process serves {task_queue}-liveness" in text, text
    assert "stack dumps asked" not in text


async def test_a_liveness_process_gone_but_still_listed_costs_the_bound_and_says_why(
        client: Client, task_queue: str) -> None:
    # Temporal lists a poller for minutes after its last poll: the route still names the queue, and
    # the request must give up at its schedule-to-start bound, recorded, not wait out the capture.
    cluster = f"lq{os.getpid()}d"
    fake = scheduler()
    async with liveness_pod(client, task_queue, cluster, fake):
        await liveness_pod_polls(client, task_queue)
    async with worker_pod(client, task_queue, fake):
        incident = await inject(client, task_queue, hang(cluster), FAST)
        report = await wait_for_state(client, incident, *PAST_ATTRIBUTION, timeout_s=60)
    text = details(report)
    assert "no stack dumps: no process took the request within 15 s" in text, text


async def test_one_process_with_liveness_on_serves_both_queues(client: Client, task_queue: str, tmp_path: Path) -> None:
    # `goodput up` and `goodput worker` with [liveness] on run this beside their shared-queue worker
    # (workers.serve); without it nothing polls the liveness queue.
    on = Settings(scheduler="fake", task_queue=task_queue, data_dir=tmp_path, resubmit_key="k" * 32,
                  liveness=LivenessConfig(enabled=True, port=0))
    off = on.model_copy(update={"liveness": LivenessConfig()})
    assert liveness_worker_for(client, off, gpu_samples=None, stacks=None) is None
    worker = liveness_worker_for(client, on, gpu_samples=gpu_store_for(on.liveness), stacks=stack_table_for(on))
    assert worker is not None and worker.task_queue == f"{task_queue}-liveness"


async def test_a_liveness_process_that_does_not_answer_is_not_asked_again_for_a_while(
        client: Client, task_queue: str) -> None:
    # The sink's wait is on the detection path: one unanswered explanation (nobody polls, yet the
    # presence says served, as for a pod just gone) must not cost every following anomaly the same.
    class Listed:
        queue = f"{task_queue}-liveness"

        async def served(self) -> bool:
            return True

    explainer = RemoteGpuExplainer(client, task_queue, presence=Listed(), timeout_s=0.5)
    found = hang("c")
    with pytest.raises(TimeoutError):
        await explainer(found)
    assert await explainer(found) is None
