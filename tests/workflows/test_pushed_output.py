"""A pushed line moves goodput only if it came from the job's own output file, as Slurm records it.

Through the real push endpoint, a real incident workflow and the fake scheduler, in autonomous
mode (so goodput would act): a record whose `file` is not the job's StdOut/StdErr, or that names no
file at all, drains nothing, requeues nothing and cancels nothing; the incident is a
recommendation whose timeline says why. The same line from the job's own output file does act,
also when forged lines reached the incident first.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from goodput.demo.scheduler import DEMO_UID, FakeScheduler
from goodput.detect.push import PushConfig
from goodput.models import Anomaly, AnomalyKind, AnomalySource, IncidentKey, Mode, Outcome, PushedFrom
from goodput.recover.incident import MAX_REPORTED_ANOMALIES, IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from tests.workflows.helpers import FAST, result, running_worker, wait_for_state
from workers.client import TemporalIncidentService
from workers.push import PushServer
from workers.watch import IncidentSink
from workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal

TOKEN = "workflow-push-token-0123456789"
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
OUT = "/shared/slurm/logs/slurm-1001.out"
ERR = "/shared/slurm/logs/slurm-1001.err"
AUTONOMOUS = FAST.model_copy(update={"mode": Mode.AUTONOMOUS})


class _Pusher:
    """The real push endpoint in front of a running worker, job 1001 writing to OUT and ERR."""

    def __init__(self, client: Client, task_queue: str, policy: Policy) -> None:
        self.cluster = f"c{uuid.uuid4().hex[:6]}"
        self.sink = IncidentSink(TemporalIncidentService(client, task_queue), policy)
        self.incident = IncidentKey(cluster=self.cluster, job_id="1001", job_attempt=0).workflow_id

    async def push(self, record: Mapping[str, object]) -> None:
        config = PushConfig(enabled=True, port=0, tokens=(TOKEN,))
        async with PushServer(config, self.sink, self.cluster) as server, httpx.AsyncClient(timeout=10) as http:
            response = await http.post(f"{server.url}/v1/logs", json=dict(record),
                                       headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200 and response.json()["anomalies"] == 1, response.text


async def _outputs(fake: FakeScheduler, stdout: str = OUT, stderr: str = ERR) -> None:
    job = await fake.get_job("1001")
    fake.add_job(job.model_copy(update={"stdout_path": stdout, "stderr_path": stderr}))


async def _push(client: Client, task_queue: str, fake: FakeScheduler, record: Mapping[str, object], *,
                wait_s: float = 0.0) -> IncidentReport:
    await _outputs(fake)
    pusher = _Pusher(client, task_queue, AUTONOMOUS.model_copy(update={"evidence_only_wait_s": wait_s}))
    await pusher.push(record)
    return await result(client, pusher.incident)


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


async def test_the_output_path_holding_another_users_file_is_evidence_only(client: Client, task_queue: str,
                                                                          tmp_path: Path) -> None:
    planted = tmp_path / "slurm-1001.out"  # at the job's output path, but not created as the job's user
    planted.write_text(XID + "\n")
    assert planted.stat().st_uid != DEMO_UID
    async with running_worker(client, task_queue) as fake:
        await _outputs(fake, stdout=str(planted))
        pusher = _Pusher(client, task_queue, AUTONOMOUS.model_copy(update={"evidence_only_wait_s": 0}))
        await pusher.push({"log": XID, "job_id": "1001", "hostname": "node2", "file": str(planted)})
        report = await result(client, pusher.incident)
        assert fake.journal() == []
    assert report.outcome is Outcome.RECOMMENDED_ONLY
    assert f"owned by uid {planted.stat().st_uid}, not by the job's user (uid {DEMO_UID})" in _said(report)


@pytest.mark.parametrize("path", [OUT, ERR])
async def test_the_jobs_own_output_file_acts(client: Client, task_queue: str, path: str) -> None:
    async with running_worker(client, task_queue) as fake:
        report = await _push(client, task_queue, fake, {"log": XID, "job_id": "1001", "hostname": "node2",
                                                        "file": path})
        assert [d.target for d in fake.journal("drain")] == ["node2"]
        assert [r.target for r in fake.journal("requeue")] == ["1001"]
    assert report.state is IncidentState.RECOVERED


async def test_a_forged_record_first_neither_acts_nor_closes_the_incident_to_the_real_one(
        client: Client, task_queue: str) -> None:
    """One incident per job attempt: a forged line arriving first must leave it open, and its node
    (node1, also in the job's allocation) must not join the real evidence's plan."""
    async with running_worker(client, task_queue) as fake:
        await _outputs(fake)
        pusher = _Pusher(client, task_queue, AUTONOMOUS)
        await pusher.push({"log": XID, "job_id": "1001", "hostname": "node1",
                           "file": "/shared/slurm/logs/slurm-x-slurm-1001.out"})
        await wait_for_state(client, pusher.incident, IncidentState.AWAITING_EVIDENCE)
        assert fake.journal() == []
        await pusher.push({"log": XID, "job_id": "1001", "hostname": "node2", "file": OUT})
        report = await result(client, pusher.incident)
        assert [d.target for d in fake.journal("drain")] == ["node2"]
        assert [r.target for r in fake.journal("requeue")] == ["1001"]
    assert report.state is IncidentState.RECOVERED
    assert "1 pushed anomaly is evidence only" in _said(report)


async def test_a_flood_of_forged_records_cannot_crowd_out_the_real_one(client: Client, task_queue: str) -> None:
    """An incident keeps at most MAX_REPORTED_ANOMALIES anomalies: 500 forged ones, each from its
    own file, fill it; the job's own record must still get in, and act."""
    async with running_worker(client, task_queue) as fake:
        await _outputs(fake)
        pusher = _Pusher(client, task_queue, AUTONOMOUS)
        service = TemporalIncidentService(client, task_queue)
        now = datetime.now(UTC)

        def forged(i: int) -> Anomaly:
            return Anomaly(id=f"forged-{i}", source=AnomalySource.LOG, kind=AnomalyKind.GPU_FAULT,
                           cluster=pusher.cluster, job_id="1001", nodes=("node1",), evidence=[XID],
                           observed_at=now, detected_at=now,
                           pushed=PushedFrom(file=f"/shared/slurm/logs/mallory/slurm-{i}-slurm-1001.out"))

        for start in range(0, MAX_REPORTED_ANOMALIES, 50):
            await asyncio.gather(*(service.inject(forged(i), AUTONOMOUS)
                                   for i in range(start, start + 50)))
        handle = client.get_workflow_handle_for(RecoveryWorkflow.run, pusher.incident)

        async def all_set_aside() -> bool:
            report = await handle.query(RecoveryWorkflow.report)
            said = report.attribution.explanation if report.attribution else ""
            return (report.state is IncidentState.AWAITING_EVIDENCE
                    and f"{MAX_REPORTED_ANOMALIES} pushed anomalies are evidence only" in said)

        while not await all_set_aside():
            await asyncio.sleep(0.1)  # polling a condition; the test's timeout bounds it
        assert fake.journal() == []
        await pusher.push({"log": XID, "job_id": "1001", "hostname": "node2", "file": OUT})
        report = await result(client, pusher.incident)
        assert [d.target for d in fake.journal("drain")] == ["node2"]
    assert report.state is IncidentState.RECOVERED
