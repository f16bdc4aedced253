"""Record the Temporal history of a node's return to service (NodeHealthWorkflow) for its replay test.

scripts/record_history.py records RecoveryWorkflow; this records the workflow an autonomous drain
hands the node to: quarantine, the health check (`true`), the return, its audit and notification,
and the offence window running out. Run after a deliberate change to NodeHealthWorkflow's commands:

    .venv/bin/python scripts/record_node_health_history.py tests/workflows/histories/node_health/<name>.json
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from goodput.models import Mode
from goodput.recover.node_health import ReturnToServicePolicy
from tests.workflows.helpers import FAST, anomaly, inject, result, running_worker
from workers import devserver
from workflows import search
from workflows.node_health import NodeHealthWorkflow, node_health_workflow_id

RETURNING = FAST.model_copy(update={"return_to_service": ReturnToServicePolicy(
    enabled=True, quarantine_s=0.2, offence_window_s=0.3, check_command=("true",))})


async def record(out: Path) -> None:
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=devserver.temporal_binary(),
        search_attributes=list(search.ALL_KEYS))
    try:
        queue = f"record-{uuid.uuid4().hex[:8]}"
        async with running_worker(env.client, queue):
            found = anomaly(cluster="replay")
            await result(env.client, await inject(env.client, queue, found, RETURNING, Mode.AUTONOMOUS))
            handle = env.client.get_workflow_handle_for(NodeHealthWorkflow.run,
                                                        node_health_workflow_id("replay", found.nodes[0]))
            state = await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(history.to_json())
        print(f"{handle.id}: {state.phase}, {len(history.events)} events -> {out}")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record(Path(sys.argv[1])))
    sys.stdout.flush()
    os._exit(0)  # short-lived SDK clients can abort at interpreter exit (sdk-python#300)
