"""NVSentinel on the lab: a fatal health event sent over real gRPC, and another as a real CloudEvent
over HTTP, to the receivers of a running worker drain the node each names and requeue the job
that ran there, as slurmctld's own log counts them (one drain, one requeue each).

The receivers and the worker run as `goodput worker` runs them (workers/serve.py) against the
Slurm CLI backend: the event names only a node; which job ran there is the receiver's question to
Slurm, and the drain and the requeue are real.
"""

from __future__ import annotations

import asyncio
import uuid

import grpc
import httpx
import pytest
from temporalio.client import Client

from activities.adapters.nvsentinel.proto import health_event_pb2_grpc as pb_grpc
from activities.adapters.slurm_cli import SlurmCliBackend
from goodput.detect.nvsentinel import NvSentinelSettings
from goodput.models import Category, IncidentKey, Mode
from goodput.ownership import owning_incident
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy, ResumeStrategy
from goodput.scheduler import JobState
from tests.fakes.notifier import RecordingNotifier
from tests.integration.nvsentinel.cases import AUTH, CE_HEADERS, TOKEN, batch, cloudevent, fresh, xid_proto
from tests.workflows.helpers import ACTS_ALONE
from workers.client import TemporalIncidentService
from workers.nvsentinel.server import serve_nvsentinel
from workers.watch import IncidentSink
from workers.worker import build_worker
from workflows.recovery import RecoveryWorkflow

from .conftest import Lab, SlurmRecords
from .harness import eventually

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.timeout(300)]

POLICY = Policy(mode=Mode.AUTONOMOUS, **ACTS_ALONE, resume=ResumeStrategy.REQUEUE, coalesce_window_s=0.2, linger_s=0,
                verify_poll_interval_s=0.5, verify_running_timeout_s=120, in_job_follow_s=0)


async def test_fatal_events_over_grpc_and_cloudevents_drain_and_requeue_on_slurm(
        lab: Lab, records: SlurmRecords, client: Client, task_queue: str) -> None:
    cluster = f"nvs{uuid.uuid4().hex[:6]}"
    backend = SlurmCliBackend()
    # a whole node each, so that each event's node runs exactly one of them
    jobs = [lab.sbatch("--comment=goodput:opt-in", "--requeue", "--exclusive", "--nodes=1", "--output=/dev/null",
                       "--wrap=sleep 600") for _ in range(2)]
    running = [await eventually(lambda j=job_id: backend.get_job(j),  # type: ignore[misc]
                                lambda j: j.state is JobState.RUNNING, timeout=30, what=f"job {job_id} running")
               for job_id in jobs]
    (by_grpc,), (by_http,) = (job.nodes for job in running)
    settings = NvSentinelSettings(enabled=True, grpc_port=0, http_port=0, tokens=(TOKEN,))
    sink = IncidentSink(TemporalIncidentService(client, task_queue), POLICY)
    async with (build_worker(client, task_queue, backend, RecordingNotifier(), policy=POLICY),
                serve_nvsentinel(settings, backend, sink, cluster) as receivers):
        assert receivers.grpc is not None and receivers.http is not None
        async with grpc.aio.insecure_channel(receivers.grpc.target) as channel:
            await pb_grpc.PlatformConnectorStub(channel).HealthEventOccurredV1(
                batch(xid_proto(by_grpc)), metadata=AUTH, timeout=30)
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(receivers.http.url, content=cloudevent(fresh(nodeName=by_http)),
                                       headers=CE_HEADERS)
        assert response.json() == {"outcome": "incident", "anomalies": 1}, response.text
        reports: list[IncidentReport] = await asyncio.gather(*(asyncio.wait_for(client.get_workflow_handle_for(
            RecoveryWorkflow.run, IncidentKey(cluster=cluster, job_id=job_id, job_attempt=0).workflow_id).result(),
            timeout=180) for job_id in jobs))

    for report, job, node in zip(reports, running, (by_grpc, by_http), strict=True):
        assert report.state is IncidentState.RECOVERED, report.timeline
        assert report.attribution is not None and report.attribution.category is Category.GPU_HARDWARE
        assert report.attribution.culprit_nodes == (node,)
        # Slurm's own records: the node drained once, by this incident: for its own reason, or (the
        # second node of the lab's one leaf switch within the shared-drain window) for the fault's
        # reason that its record says it shared; the job requeued once
        [drain] = records.drains(node)
        owner = owning_incident(drain)
        assert owner == report.incident_id or any(f"shared drain of fault {owner}" in done
                                                  for done in report.actions_done), (drain, report.actions_done)
        assert records.requeues(job.job_id) == 1, records.text()
        again = await backend.get_job(job.job_id)
        assert again.state is JobState.RUNNING and again.restart_count == 1 and node not in again.nodes
