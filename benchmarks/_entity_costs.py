"""How hard a round worked the cluster's entity workflows (node memory, track record), from their histories.

Why: issue #29's storm waited on those two workflows, one per cluster, each answering every
incident's report through its own workflow tasks. Whether their batching binds is told by how
many reports each update or signal carried and how many workflow tasks they cost; `storm-lab`
prints these per round (every run of each workflow, continued-as-new ones included).
"""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from workflows.node_memory import node_memory_workflow_id
from workflows.trust import trust_workflow_id


def _requests(payloads: Any) -> int:
    """Reports in one update's or signal's batch argument (a `requests` list); 1 for any other."""
    try:
        body = json.loads(payloads[0].data)
    except (IndexError, ValueError):
        return 1
    return len(body["requests"]) if isinstance(body, dict) and isinstance(body.get("requests"), list) else 1


def _fold(events: list[HistoryEvent], into: dict[str, Any]) -> None:
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            into["workflow_tasks"] += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            attrs = event.workflow_execution_update_accepted_event_attributes
            into["updates"] += 1
            into["batch_sizes"].append(_requests(attrs.accepted_request.input.args.payloads))
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            into["signals"] += 1
            into["batch_sizes_signalled"].append(
                _requests(event.workflow_execution_signaled_event_attributes.input.payloads))


async def entity_costs(client: Client, cluster: str) -> dict[str, dict[str, Any]]:
    """Per entity: workflow tasks, updates and signals taken, reports per update (mean, max) and
    per signal, over every run of the cluster's entity workflow."""
    out: dict[str, dict[str, Any]] = {}
    for name, workflow_id in (("node_memory", node_memory_workflow_id(cluster)),
                              ("trust_record", trust_workflow_id(cluster))):
        tally: dict[str, Any] = {"runs": 0, "workflow_tasks": 0, "updates": 0, "signals": 0, "batch_sizes": [],
                                 "batch_sizes_signalled": []}
        async for run in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
            tally["runs"] += 1
            history = await client.get_workflow_handle(workflow_id, run_id=run.run_id).fetch_history()
            _fold(list(history.events), tally)
        sizes, signalled = tally.pop("batch_sizes"), tally.pop("batch_sizes_signalled")
        tally["reports_per_update"] = {"mean": round(sum(sizes) / len(sizes), 1) if sizes else 0,
                                       "max": max(sizes, default=0)}
        tally["reports_per_signal"] = {"mean": round(sum(signalled) / len(signalled), 1) if signalled else 0,
                                       "max": max(signalled, default=0)}
        out[name] = tally
    return out


def entity_row(tally: dict[str, Any]) -> str:
    """One entity's cell in the printed table: reports per update as mean≤max."""
    per = tally["reports_per_update"]
    return f"{tally['workflow_tasks']} / {tally['updates']} ({per['mean']:.0f}≤{per['max']}) / {tally['signals']}"
