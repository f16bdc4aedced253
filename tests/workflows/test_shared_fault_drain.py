"""Shared drains on the real Temporal dev server: two node incidents of one leaf switch, first
observed in one window, drain their nodes with one reason naming the fault (the one reason the
CLI backend's coalescer needs to send them as one `scontrol update NodeName=a,b`), and each job
incident records the fault it shared."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client

from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.models import Mode
from goodput.ownership import owning_incident
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_incident import NodeIncidentPolicy
from goodput.recover.shared_fault import owning_fault
from goodput.scheduler import SlurmSwitch
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker

pytestmark = pytest.mark.temporal
SHARING = FAST.model_copy(update={"node_incident": NodeIncidentPolicy(shared_drain_window_s=60.0)})
AT = datetime(2026, 12, 4, 1, 0, 59, 500000, tzinfo=UTC)
LATER = AT + timedelta(seconds=1)


def one_switch() -> FakeScheduler:
    fake = FakeScheduler(demo_cluster(node_count=12))
    fake.switches = [SlurmSwitch(name="leaf1", level=0, nodes="node[1-6]")]
    return fake


async def _two_faults(client: Client, task_queue: str, fake: FakeScheduler) -> list[str]:
    first = anomaly("1001", nodes=("node2",)).model_copy(update={"observed_at": AT})
    # a second later, across a minute's line: the grid the window used to be split this into two faults
    second = anomaly("1002", nodes=("node3",), cluster=first.cluster).model_copy(update={"observed_at": LATER})
    return list(await asyncio.gather(*(inject(client, task_queue, a, SHARING, Mode.AUTONOMOUS)
                                       for a in (first, second))))


async def test_two_node_incidents_of_one_switch_drain_with_one_reason(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue, one_switch(), policy=SHARING) as fake:
        ids = await _two_faults(client, task_queue, fake)
        reports = await asyncio.gather(*(result(client, i) for i in ids))
    assert [r.state for r in reports] == [IncidentState.RECOVERED] * 2, [r.timeline for r in reports]
    drains = fake.journal("drain")
    assert sorted(d.target for d in drains) == ["node2", "node3"]
    reasons = {d.detail for d in drains}
    assert len(reasons) == 1, reasons  # one reason: one command through the coalescer
    fault = owning_fault(reasons.pop())  # anchored on whichever incident isolated first
    assert fault in {f"fault-switch-leaf1-{int(t.timestamp())}" for t in (AT, LATER)}, fault
    for report in reports:  # each incident's record names the fault its drain shared
        assert any(f"shared drain of fault {fault}" in done for done in report.actions_done), report.actions_done


async def test_without_the_window_each_drain_names_its_incident(client: Client, task_queue: str) -> None:
    async with running_worker(client, task_queue, one_switch(), policy=FAST) as fake:
        ids = await _two_faults(client, task_queue, fake)
        await asyncio.gather(*(result(client, i) for i in ids))
    assert sorted(owning_incident(d.detail) or "" for d in fake.journal("drain")) == sorted(ids)
