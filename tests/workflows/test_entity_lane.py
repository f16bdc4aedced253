"""The cluster-wide entities run on a queue of their own, on the real dev server (#29).

Every incident consults its cluster's node memory and track record; on the incidents' queue their
workflow tasks waited behind every incident's in a storm. New entities start on the entities'
queue; one a deployment started on the shared queue before moves there when it continues as new,
its memory intact.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from temporalio.client import Client

from activities.adapters.node_memory import TemporalNodeMemory
from activities.adapters.trust import TemporalTrustRecord
from goodput.diagnose.node_memory import NodeMemoryPolicy, Observation
from goodput.entity_lane import entity_queue
from goodput.recover.trust import Fate, TrustEvent
from tests.workflows.helpers import running_worker
from workflows.node_memory import (
    CONTINUE_AS_NEW_AFTER,
    ConsultBatch,
    ConsultRequest,
    NodeMemoryStart,
    NodeMemoryWorkflow,
    node_memory_workflow_id,
)
from workflows.trust import trust_workflow_id
from workflows.update_batch import MAX_BATCH


def observed(i: int, node: str = "node1") -> Observation:
    return Observation(incident_id=f"inc-{i}", job_id=str(i), user=f"u{i % 3}", nodes=(node,), ambiguous=True,
                       at=datetime.now(UTC))


async def test_new_entities_start_on_the_entities_queue(client: Client, task_queue: str) -> None:
    cluster = f"lane{uuid.uuid4().hex[:6]}"
    async with running_worker(client, task_queue):
        await TemporalNodeMemory(client, task_queue).consult(cluster, observed(1), NodeMemoryPolicy())
        await TemporalTrustRecord(client, task_queue).note(
            cluster, TrustEvent(rule="nccl-timeout", fate=Fate.RECOMMENDED, incident_id="inc-1",
                                at=datetime.now(UTC)), None)
        memory = await client.get_workflow_handle(node_memory_workflow_id(cluster)).describe()
        record = await client.get_workflow_handle(trust_workflow_id(cluster)).describe()
    assert memory.task_queue == record.task_queue == entity_queue(task_queue) != task_queue


async def test_a_memory_started_on_the_shared_queue_moves_to_the_entities_queue_with_its_state(
        client: Client, task_queue: str) -> None:
    cluster = f"lane{uuid.uuid4().hex[:6]}"
    workflow_id = node_memory_workflow_id(cluster)
    async with running_worker(client, task_queue):
        # As a deployment from before the entities' queue started it.
        handle = await client.start_workflow(NodeMemoryWorkflow.run, NodeMemoryStart(cluster=cluster),
                                             id=workflow_id, task_queue=task_queue)
        first_run = (await handle.describe()).run_id
        for start in range(0, CONTINUE_AS_NEW_AFTER, MAX_BATCH):
            batch = ConsultBatch(requests=tuple(ConsultRequest(observation=observed(i, "node7"))
                                                for i in range(start, start + MAX_BATCH)))
            await handle.execute_update(NodeMemoryWorkflow.consult_many, batch)
        latest = client.get_workflow_handle(workflow_id)
        for _ in range(100):
            described = await latest.describe()
            if described.run_id != first_run:
                break
            await asyncio.sleep(0.1)
        standing = await latest.query(NodeMemoryWorkflow.standing)
    assert described.run_id != first_run and described.task_queue == entity_queue(task_queue)
    assert "node7" in {s.node for s in standing if s.suspect}


def test_the_entities_queue_of_the_entities_queue_is_itself() -> None:
    assert entity_queue("goodput") == "goodput-entities" == entity_queue("goodput-entities")
