"""Replay committed NodeHealthWorkflow histories against today's code.

`node_health_return` was recorded before `return-own-drain` (its `return_node` input names no
incident: the activity then takes any goodput reason, as it did); `node_health_return_own_drain`
takes the patch. Both must replay, or a node's return running during an upgrade breaks. Recorded
with scripts/record_node_health_history.py (the first from the tree of 93c2514).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.node_health import NodeHealthWorkflow

HISTORIES = Path(__file__).parent / "histories" / "node_health"


def _return_input(history: WorkflowHistory) -> dict[str, object]:
    [payload] = [e.activity_task_scheduled_event_attributes.input.payloads[0].data for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")
                 and e.activity_task_scheduled_event_attributes.activity_type.name == "return_node"]
    loaded: dict[str, object] = json.loads(payload)
    return loaded


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_recorded_node_health_histories_replay(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[NodeHealthWorkflow], data_converter=pydantic_data_converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert replayed.replay_failure is None
    tracked = _return_input(history).get("incident_id")
    if path.stem.endswith("_own_drain"):
        assert isinstance(tracked, str) and tracked.startswith("incident-replay-")
    else:
        assert tracked is None  # recorded before the patch: the input names no incident


def test_the_corpus_holds_both_sides_of_the_patch() -> None:
    """The parametrized replay above would pass on an empty folder."""
    assert {p.stem for p in HISTORIES.glob("*.json")} >= {"node_health_return", "node_health_return_own_drain"}
