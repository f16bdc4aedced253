"""A process that delivered to an incident once sends its later anomalies as plain signals, and a
closed incident still refuses late evidence exactly as the signal-with-start does (#29).

On the real Temporal dev server, with a client interceptor that counts the two kinds of call.
"""

from __future__ import annotations

import pytest
from temporalio.client import Client

from goodput.models import Anomaly, AnomalyKind, Category, Mode
from tests.helpers import eventually
from tests.workflows.helpers import FAST, DeliveryCalls, anomaly, running_worker, with_interceptor
from workers.client import TemporalIncidentService
from workers.incident_delivery import CLOSED_NOTE
from workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal

GATHER = FAST.model_copy(update={"mode": Mode.MONITOR, "coalesce_window_s": 30.0})


class Counting:
    """Counts signal-with-starts and plain signals, by the signal's name."""

    def __init__(self) -> None:
        self.starts: list[str] = []
        self.signals: list[str] = []

    def __call__(self, kind: str, signal: str) -> None:
        (self.starts if kind == "start" else self.signals).append(signal)


def counted(client: Client) -> tuple[Client, Counting]:
    counting = Counting()
    return with_interceptor(client, DeliveryCalls(counting)), counting


def crash(job_id: str, cluster: str) -> Anomaly:
    return anomaly(job_id, kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT, cluster=cluster)


async def test_later_anomalies_of_an_open_incident_go_as_plain_signals_and_all_reach_its_evidence(
        client: Client, task_queue: str) -> None:
    counting_client, counts = counted(client)
    a1, a2, a3, a4 = (crash("7101", "deliver-open") for _ in range(4))
    service = TemporalIncidentService(counting_client, task_queue)
    async with running_worker(client, task_queue):
        opened = await service.inject(a1, GATHER)
        second = await service.inject(a2, GATHER)
        batch = await service.inject_batch([a3, a4], GATHER)
        handle = client.get_workflow_handle_for(RecoveryWorkflow.run, opened.incident_id)
        report = await eventually(lambda: handle.query(RecoveryWorkflow.report), lambda r: r.anomaly_count >= 4,
                                  timeout=30, interval=0.1, what="four anomalies in the incident")
    assert opened.new_incident and not second.new_incident and not batch.new_incident
    assert second.incident_id == batch.incident_id == opened.incident_id
    assert counts.starts == ["anomaly"]
    assert counts.signals == ["anomaly", "anomalies"]
    assert [a.id for a in report.anomalies] == [a1.id, a2.id, a3.id, a4.id]


async def test_a_closed_incident_refuses_late_evidence_as_before_and_is_forgotten(
        client: Client, task_queue: str) -> None:
    counting_client, counts = counted(client)
    a1, a2, a3 = (crash("7102", "deliver-closed") for _ in range(3))
    service = TemporalIncidentService(counting_client, task_queue)
    async with running_worker(client, task_queue):
        opened = await service.inject(a1, GATHER)
        await client.get_workflow_handle(opened.incident_id).terminate("the test closes it")
        late = await service.inject(a2, GATHER)  # a plain signal finds no open run: the full call says why
        later = await service.inject(a3, GATHER)  # forgotten: straight to the full call
    assert not late.new_incident and late.note == CLOSED_NOTE
    assert not later.new_incident and later.note == CLOSED_NOTE
    assert counts.signals == ["anomaly"]
    assert counts.starts == ["anomaly", "anomaly", "anomaly"]
