"""A pushed line moves goodput only if it came from the job's own output file, as Slurm records it.

Through the real push endpoint, a real incident workflow and the fake scheduler, in autonomous
mode (so goodput would act): a record whose `file` is not the job's StdOut/StdErr, or that names no
file at all, drains nothing, requeues nothing and cancels nothing; the incident is a
recommendation whose timeline says why. The same line from the job's own output file does act.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import httpx
import pytest
from temporalio.client import Client

from goodput.demo.scheduler import FakeScheduler
from goodput.detect.push import PushConfig
from goodput.models import IncidentKey, Mode, Outcome
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from tests.workflows.helpers import FAST, result, running_worker
from workers.client import TemporalIncidentService
from workers.push_server import PushServer
from workers.watching import IncidentSink

pytestmark = pytest.mark.temporal

TOKEN = "workflow-push-token-0123456789"
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
OUT = "/shared/slurm/logs/slurm-1001.out"
ERR = "/shared/slurm/logs/slurm-1001.err"


async def _push(client: Client, task_queue: str, fake: FakeScheduler, record: Mapping[str, object]) -> IncidentReport:
    cluster = f"c{uuid.uuid4().hex[:6]}"
    job = await fake.get_job("1001")
    fake.add_job(job.model_copy(update={"stdout_path": OUT, "stderr_path": ERR}))
    policy = FAST.model_copy(update={"mode": Mode.AUTONOMOUS})
    sink = IncidentSink(TemporalIncidentService(client, task_queue), policy)
    async with PushServer(PushConfig(enabled=True, port=0, tokens=(TOKEN,)), sink, cluster) as server:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.post(f"{server.url}/v1/logs", json=dict(record),
                                       headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200 and response.json()["anomalies"] == 1, response.text
        return await result(client, IncidentKey(cluster=cluster, job_id="1001", job_attempt=0).workflow_id)


def _said(report: IncidentReport) -> str:
    return "\n".join(e.detail for e in report.timeline)


@pytest.mark.parametrize("line", [XID, OOM])
async def test_a_file_named_like_the_jobs_output_cannot_act(client: Client, task_queue: str, line: str) -> None:
    forged = "/shared/slurm/logs/slurm-x-slurm-1001.out"  # another user's file; the job id from its name
    async with running_worker(client, task_queue) as fake:
        report = await _push(client, task_queue, fake, {"log": line, "job_id": "1001", "hostname": "node2",
                                                        "file": forged})
        assert fake.journal() == []  # no drain, no requeue, no cancel, no hold
    assert report.state is IncidentState.RECOMMENDED_ONLY and report.outcome is Outcome.RECOMMENDED_ONLY
    assert forged in _said(report) and "not job 1001's output" in _said(report)


async def test_a_record_naming_no_file_is_evidence_only(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue) as fake:
        report = await _push(client, task_queue, fake, {"log": XID, "job_id": "1001", "hostname": "node2"})
        assert fake.journal() == []
    assert report.outcome is Outcome.RECOMMENDED_ONLY
    assert "names no file" in _said(report)


@pytest.mark.parametrize("path", [OUT, ERR])
async def test_the_jobs_own_output_file_acts(client: Client, task_queue: str, path: str) -> None:
    async with running_worker(client, task_queue) as fake:
        report = await _push(client, task_queue, fake, {"log": XID, "job_id": "1001", "hostname": "node2",
                                                        "file": path})
        assert [d.target for d in fake.journal("drain")] == ["node2"]
        assert [r.target for r in fake.journal("requeue")] == ["1001"]
    assert report.state is IncidentState.RECOVERED
