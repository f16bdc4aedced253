"""Hang incidents get stack dumps from the node agents on the real Temporal dev server: the request
rides on the agents' real heartbeats (HTTP on loopback), their dumps name the process outside the
collective as the culprit, and an incident whose agents never answer goes on after the bound."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from temporalio.client import Client

from activities.adapters.heartbeat import HeartbeatSender
from activities.adapters.stack_agent import StackResponder
from activities.adapters.stack_dump import StackReport
from goodput.demo.scheduler import FakeScheduler, demo_cluster
from goodput.detect.node_liveness import LivenessConfig, LivenessTracker, heartbeat_token
from goodput.detect.stack_requests import StackRequestTable
from goodput.models import Anomaly, AnomalyKind, Category, CulpritKind
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from tests.fakes.notifier import RecordingNotifier
from tests.workflows.helpers import FAST, anomaly, inject, wait_for_state
from workers.liveness import HeartbeatServer
from workers.liveness_worker import build_liveness_worker
from workers.worker import build_worker

pytestmark = pytest.mark.temporal
SECRET = b"s" * 32
PAST_ATTRIBUTION = tuple(s for s in IncidentState if s not in (IncidentState.DETECTED, IncidentState.ATTRIBUTED))


def py_spy(pid: int, frames: list[str]) -> str:
    return "\n".join([f"Process {pid}: python train.py", "Python v3.11.9 (/usr/bin/python3.11)", "",
                      f'Thread {pid} (active): "MainThread"', *[f"    {f}" for f in frames]])


IN_ALL_REDUCE = ["all_reduce (torch/distributed/distributed_c10d.py:2501)", "train_step (train.py:212)"]
IN_SAVE = ["write (torch/serialization.py:620)", "save_checkpoint (train.py:120)"]
DUMPS = {"node1": {11: py_spy(11, IN_ALL_REDUCE), 12: py_spy(12, IN_ALL_REDUCE)},
         "node2": {21: py_spy(21, IN_ALL_REDUCE), 22: py_spy(22, IN_SAVE)}}


@asynccontextmanager
async def service(client: Client, task_queue: str, cluster: str, wait_s: float) -> AsyncIterator[HeartbeatServer]:
    """A worker, its liveness-queue worker and the heartbeat endpoint sharing one request table, as
    `goodput serve` runs them."""
    table = StackRequestTable(ttl_s=wait_s + 30)
    server = HeartbeatServer(LivenessConfig(enabled=True, port=0), LivenessTracker(LivenessConfig()), cluster,
                             SECRET, stacks=table)
    worker = build_worker(client, task_queue, FakeScheduler(demo_cluster()), RecordingNotifier(),
                          fail_workflows_on_bugs=True, stacks=table, stack_wait_s=wait_s)
    liveness = build_liveness_worker(client, task_queue, FakeScheduler(demo_cluster()), stacks=table,
                                     gpu_samples=None, stack_wait_s=wait_s)
    await server.start()
    try:
        async with worker, liveness:
            yield server
    finally:
        await server.stop()


@asynccontextmanager
async def agents(server: HeartbeatServer, cluster: str, capture: Callable[[str, str], StackReport],
                 *nodes: str) -> AsyncIterator[list[StackResponder]]:
    """Each node's real heartbeat loop and stack responder, with `capture(node, job)` for py-spy."""
    stop = asyncio.Event()
    responders, tasks = [], []
    for node in nodes:
        token = heartbeat_token(SECRET, cluster, node)
        responder = StackResponder(server.url, token, cluster=cluster, node=node,
                                   capture=functools.partial(_on, capture, node))
        sender = HeartbeatSender(server.url, token, cluster=cluster, node=node, interval_s=0.2,
                                 on_response=responder.take)
        responders.append(responder)
        tasks.append(asyncio.create_task(sender.run(stop)))
    try:
        yield responders
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        for responder in responders:
            await responder.close()


def _on(capture: Callable[[str, str], StackReport], node: str, job: str) -> StackReport:
    return capture(node, job)


def hang(cluster: str) -> Anomaly:
    return anomaly("1001", kind=AnomalyKind.HANG, category=Category.HANG, nodes=(), cluster=cluster,
                   evidence=("no step for 300 s",))


def details(report: IncidentReport) -> str:
    return "\n".join(e.detail for e in report.timeline)


async def test_a_hang_gets_the_agents_stacks_and_names_the_process_outside_the_collective(
        client: Client, task_queue: str) -> None:
    # broke/before: a hang incident asked no agent for stacks and ended with no culprit.
    cluster = f"stk{os.getpid()}a"
    async with service(client, task_queue, cluster, wait_s=20) as server, agents(
            server, cluster, lambda node, job: StackReport(job, dumps=DUMPS[node]), "node1", "node2"):
        incident = await inject(client, task_queue, hang(cluster), FAST)
        report = await wait_for_state(client, incident, *PAST_ATTRIBUTION, timeout_s=40)
    assert report.attribution is not None and report.attribution.category is Category.HANG
    culprit = report.attribution.culprits[0]
    assert (culprit.kind, culprit.id) == (CulpritKind.RANK, "pid 22 on node2")
    assert not report.attribution.drain  # a stack never drains a node
    text = details(report)
    assert "node1: py-spy dumped 2 process(es)" in text and "culprit from the stack dumps: pid 22 on node2" in text


async def test_with_no_agent_answering_the_incident_goes_on_after_the_bound(client: Client, task_queue: str) -> None:
    # broke/before: no stack capture existed (the workflow never asked); with one that waited
    # without a bound the incident would never be planned.
    cluster = f"stk{os.getpid()}b"
    async with service(client, task_queue, cluster, wait_s=2) as server, agents(
            server, cluster, lambda node, job: StackReport(job, dumps=DUMPS[node]), "node1"):
        incident = await inject(client, task_queue, hang(cluster), FAST)
        report = await wait_for_state(client, incident, *PAST_ATTRIBUTION, timeout_s=40)
    assert report.attribution is not None
    assert not any(c.kind is CulpritKind.RANK for c in report.attribution.culprits)  # one node's dumps name nobody
    text = details(report)
    assert "node2: no stack dump within 2 s" in text and "node1: py-spy dumped 2 process(es)" in text
