"""The sink folds a burst of one incident's anomalies into few deliveries, and loses none (#29).

On the real Temporal dev server: ten concurrent anomalies of one job are two signals, not ten; an
anomaly that arrives while a batch is in flight goes in the next delivery; a refused batch is tried
again; a batch folds each anomaly exactly as the single `anomaly` signal does (a repeated id once);
the incident's evidence lists every anomaly sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from goodput.models import Anomaly, AnomalyKind, Category, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.policy import Policy
from goodput.service.incidents import InjectResult
from tests.helpers import eventually
from tests.workflows.helpers import FAST, DeliveryCalls, anomaly, running_worker, with_interceptor
from workers.client import TemporalIncidentService
from workers.watch import IncidentSink
from workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal

# Monitor mode and a long window: the incident only gathers evidence while the test looks at it.
GATHER = FAST.model_copy(update={"mode": Mode.MONITOR, "coalesce_window_s": 30.0})


def crash(job_id: str, cluster: str) -> Anomaly:
    return anomaly(job_id, kind=AnomalyKind.CRASH, nodes=(), category=Category.NCCL_TIMEOUT, cluster=cluster)


async def signals(client: Client, incident_id: str) -> int:
    history = await client.get_workflow_handle(incident_id).fetch_history()
    return sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED for e in history.events)


async def evidence(client: Client, incident_id: str, count: int) -> IncidentReport:
    handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident_id)
    return await eventually(lambda: handle.query(RecoveryWorkflow.report), lambda r: r.anomaly_count >= count,
                            timeout=30, interval=0.1, what=f"{count} anomalies in {incident_id}")


class Gated:
    """The real service, each delivery held until the test lets it go; records each one's size."""

    def __init__(self, real: TemporalIncidentService) -> None:
        self.real = real
        self.sizes: list[int] = []
        self.gates: list[asyncio.Event] = []

    async def _held(self, anomalies: Sequence[Anomaly], policy: Policy | None) -> InjectResult:
        gate = asyncio.Event()
        self.sizes.append(len(anomalies))
        self.gates.append(gate)
        await gate.wait()
        return await self.real.inject_batch(anomalies, policy)

    async def inject(self, a: Anomaly, policy: Policy | None, mode: Mode | None = None) -> InjectResult:
        return await self._held([a], policy)

    async def inject_batch(self, anomalies: Sequence[Anomaly], policy: Policy | None,
                           mode: Mode | None = None) -> InjectResult:
        return await self._held(anomalies, policy)


async def test_ten_concurrent_anomalies_of_one_job_are_two_signals_and_all_ten_in_the_evidence(
        client: Client, task_queue: str) -> None:
    cluster = "fold-burst"
    burst = [crash("7001", cluster) for _ in range(10)]
    async with running_worker(client, task_queue):
        sink = IncidentSink(TemporalIncidentService(client, task_queue), GATHER)
        await asyncio.gather(*(sink.submit(a) for a in burst))
        incident = burst[0].incident_key.workflow_id
        report = await evidence(client, incident, 10)
        assert await signals(client, incident) == 2
    assert report.anomaly_count == 10
    assert {a.id for a in report.anomalies} == {a.id for a in burst}


async def test_an_anomaly_arriving_while_a_batch_is_in_flight_goes_in_the_next_delivery(
        client: Client, task_queue: str) -> None:
    cluster = "fold-late"
    a1, a2, a3, a4 = (crash("7002", cluster) for _ in range(4))
    async with running_worker(client, task_queue):
        gated = Gated(TemporalIncidentService(client, task_queue))
        sink = IncidentSink(gated, GATHER)
        first = asyncio.create_task(sink.submit(a1))
        await eventually(lambda: len(gated.gates), lambda n: n == 1, timeout=10, interval=0.01, what="a1 out")
        waiting = [asyncio.create_task(sink.submit(a)) for a in (a2, a3)]
        await asyncio.sleep(0)  # a2 and a3 reach the sink while a1 is in flight
        assert gated.sizes == [1]  # they wait for it
        gated.gates[0].set()
        await first
        await eventually(lambda: len(gated.gates), lambda n: n == 2, timeout=10, interval=0.01,
                         what="the batch out")
        late = asyncio.create_task(sink.submit(a4))  # while the batch of a2 and a3 is in flight
        await asyncio.sleep(0)
        gated.gates[1].set()
        await asyncio.gather(*waiting)
        await eventually(lambda: len(gated.gates), lambda n: n == 3, timeout=10, interval=0.01,
                         what="a4 out")
        gated.gates[2].set()
        await late
        incident = a1.incident_key.workflow_id
        report = await evidence(client, incident, 4)
        assert await signals(client, incident) == 3
    assert gated.sizes == [1, 2, 1]
    assert [a.id for a in report.anomalies] == [a1.id, a2.id, a3.id, a4.id]


class RefuseFirstBatch:
    """Temporal sheds the first `anomalies` delivery, as it does in a storm: a signal-with-start, or
    the plain signal a process sends to an incident it knows open (workers.incident_delivery)."""

    def __init__(self) -> None:
        self.refused = 0

    def __call__(self, kind: str, signal: str) -> None:
        if signal == "anomalies" and not self.refused:
            self.refused += 1
            raise RPCError("shed", RPCStatusCode.RESOURCE_EXHAUSTED, b"")


async def test_a_refused_batch_is_delivered_again_and_nothing_is_lost(client: Client, task_queue: str) -> None:
    refusing = RefuseFirstBatch()
    shedding = with_interceptor(client, DeliveryCalls(refusing))
    burst = [crash("7003", "fold-refused") for _ in range(6)]
    async with running_worker(client, task_queue):
        sink = IncidentSink(TemporalIncidentService(shedding, task_queue), GATHER)
        await asyncio.gather(*(sink.submit(a) for a in burst))
        report = await evidence(client, burst[0].incident_key.workflow_id, 6)
    assert refusing.refused == 1
    assert report.anomaly_count == 6
    assert {a.id for a in report.anomalies} == {a.id for a in burst}


async def test_a_batch_folds_each_anomaly_as_the_single_signal_does_a_repeated_id_once(
        client: Client, task_queue: str) -> None:
    a1, a2 = crash("7004", "fold-repeat"), crash("7004", "fold-repeat")
    service = TemporalIncidentService(client, task_queue)
    async with running_worker(client, task_queue):
        opened = await service.inject(a1, GATHER)
        again = await service.inject_batch([a1, a2, a2], GATHER)  # a detector delivering at least once
        report = await evidence(client, a1.incident_key.workflow_id, 2)
        assert await signals(client, opened.incident_id) == 2
    assert opened.new_incident and not again.new_incident
    assert report.anomaly_count == 2
    assert [a.id for a in report.anomalies] == [a1.id, a2.id]
