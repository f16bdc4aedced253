"""Replay a committed history of a full autonomous recovery against today's workflow code.

If this fails with a NondeterminismError, a change reordered or renamed the workflow's commands:
incidents running during an upgrade would break. Guard the change with `workflow.patched` (and
keep this history), or re-record only if no incident can be in flight (scripts/record_history.py).
When a patched branch and the histories that predate it may go: docs/architecture.md#retiring-patches.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.recovery import RecoveryWorkflow

HISTORIES = Path(__file__).parent / "histories"


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_recorded_recovery_histories_replay(path: Path) -> None:
    """One history per workflow version still in the field: each must replay on today's code."""
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[RecoveryWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
    kinds = {e.activity_task_scheduled_event_attributes.activity_type.name
             for e in history.events if e.HasField("activity_task_scheduled_event_attributes")}
    # A hang drains nothing; its history proves the stack request instead (workflows.hang_stacks).
    step = "capture_stacks" if path.stem.endswith("_hang_stacks") else "isolate"
    expected = {"attribute", step, "resume", "verify", "notify"}
    if path.stem.endswith(("_fewer_steps_hang_stacks", "_patches_first_hang_stacks")):
        # The hang path under fewer-steps: the stack request right after the local `attribute`
        # (a query's replay failed twice in CI on the patch marker asked there; under
        # patches-asked-first no patch is asked there: workflows.recovery_steps.PATCHES_ASKED_FIRST).
        expected = {"liveness_route", "capture_stacks", "consult_memory_and_trust", "resume", "verify", "notify"}
    if path.stem.endswith(("_fewer_steps", "_local_step_retries")):
        # A crash naming no node drains nothing; it attributes in a local activity and asks the
        # node memory and the track record in one round trip (workflows.recovery_actions.remember).
        expected = {"consult_memory_and_trust", "resume", "verify", "notify"}
    if path.stem.endswith("_straggler_pends"):
        # A straggler pends its exclusion (the node memory keeps it), then the job's failure on
        # another node drains that node and requeues; under fewer-steps attribution runs local.
        expected = {"consult_node_memory", "isolate", "resume", "verify", "notify"}
    assert expected <= kinds
    if path.stem.endswith("_local_step_retries"):
        # The controller was down for the first two job reads: the workflow retried the local
        # `attribute` on its own timers (workflows.recovery_steps.run_local_step).
        assert sum(e.HasField("timer_started_event_attributes") for e in history.events) >= 3
