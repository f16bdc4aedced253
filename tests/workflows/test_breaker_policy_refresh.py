"""The cluster's breaker takes the service's breaker policy, with Slurm's switch map, as it
continues as new: a limit changed in the settings, or a topology read from Slurm, reaches a
breaker that outlives the workers that started it (workflow patch `breaker-policy-refresh`)."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from goodput.recover.breaker import BreakerPolicy, DrainRequest
from goodput.recover.policy import Policy
from goodput.scheduler import SlurmSwitch
from tests.helpers import eventually
from tests.workflows.helpers import running_worker
from workflows.breaker import BreakerStart, DrainBreakerWorkflow, breaker_workflow_id

pytestmark = pytest.mark.temporal


async def test_a_continued_breaker_runs_under_the_services_policy_and_slurms_switches(
        client: Client, task_queue: str) -> None:
    cluster = f"refresh{uuid.uuid4().hex[:6]}"
    # The service now limits drains to one per switch and names no switches: Slurm's are used.
    service = Policy(breaker=BreakerPolicy(max_drained_nodes=10, max_drains_per_switch=1))
    async with running_worker(client, task_queue, policy=service) as fake:
        fake.switches = [SlurmSwitch(name="leaf1", nodes="node[1-8]")]
        # Started under an older policy (no switch limit), continuing after two decisions.
        handle = await client.start_workflow(
            DrainBreakerWorkflow.run, BreakerStart(cluster=cluster, policy=BreakerPolicy(max_drained_nodes=10),
                                                   continue_as_new_after=2),
            id=breaker_workflow_id(cluster), task_queue=task_queue)
        first_run = (await handle.describe()).run_id
        for i, node in enumerate(("node1", "node2")):
            verdict = await handle.execute_update(DrainBreakerWorkflow.reserve,
                                                  DrainRequest(incident_id=f"i{i}", nodes=(node,)))
            assert verdict.allowed  # the old policy has no switch limit

        def current() -> object:
            return client.get_workflow_handle(breaker_workflow_id(cluster)).describe()

        await eventually(current, lambda d: d.run_id != first_run and d.status is WorkflowExecutionStatus.RUNNING,
                         what="the breaker continued as new")
        latest = client.get_workflow_handle(breaker_workflow_id(cluster))
        third = await latest.execute_update(DrainBreakerWorkflow.reserve, DrainRequest(incident_id="i2",
                                                                                       nodes=("node3",)))
    assert not third.allowed and third.group == "switch leaf1", third
    assert "switch leaf1 drain limit tripped" in third.reason
