"""An incident whose job Slurm (25.11+) requeued itself and holds (expedited requeue, no epilog
failed; docs/slurm.md): released when goodput's verdict is restart, left held and said so when
it is not, the release recommended in monitor mode. On the real Temporal dev server."""

from __future__ import annotations

import pytest
from temporalio.client import Client

from goodput.models import AnomalyKind, Category, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from goodput.scheduler import JobState
from tests.workflows.helpers import FAST, anomaly, held_by_slurm, inject, result, running_worker

pytestmark = pytest.mark.temporal
S = IncidentState
# One attempt, a short verification: without the release the incident escalates quickly.
POLICY = FAST.model_copy(update={"max_resume_attempts": 1, "verify_running_timeout_s": 8})


def _said(report: IncidentReport, text: str) -> bool:
    return any(text in e.detail for e in report.timeline)


async def test_a_restart_verdict_releases_the_hold_and_verifies(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue, await held_by_slurm()) as fake:
        incident = await inject(client, task_queue, anomaly(), POLICY, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.RECOVERED, report.timeline[-1].detail
    assert fake.journal("requeue") == [] and [r.target for r in fake.journal("release")] == ["1001"]
    job = await fake.get_job("1001")
    assert job.state is JobState.RUNNING and "node2" not in job.nodes  # excluded before the release
    assert _said(report, "held by Slurm's expedited requeue")


async def test_an_app_error_verdict_leaves_the_hold_and_says_why(client: Client, task_queue: str) -> None:
    a = anomaly(kind=AnomalyKind.CRASH, category=Category.APP_ERROR, nodes=("node1",),
                evidence=("ValueError: bad batch",))
    async with running_worker(client, task_queue, await held_by_slurm()) as fake:
        incident = await inject(client, task_queue, a, POLICY, Mode.AUTONOMOUS)
        report = await result(client, incident)
    assert report.state is S.STOPPED
    assert fake.journal("release") == [] and fake.journal("cancel") == []
    job = await fake.get_job("1001")
    assert job.held and job.expedite_held  # neither released nor cancelled
    assert _said(report, "left held, goodput's verdict is no restart")


async def test_monitor_mode_recommends_the_release(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue, await held_by_slurm()) as fake:
        incident = await inject(client, task_queue, anomaly(), POLICY, Mode.MONITOR)
        report = await result(client, incident)
    assert report.state is S.RECOMMENDED_ONLY
    assert fake.journal() == [] or all(e.op not in ("release", "requeue") for e in fake.journal())
    assert _said(report, "recommended — release it (`scontrol release 1001`)")
