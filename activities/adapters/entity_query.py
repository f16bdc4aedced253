"""Reading a per-cluster entity workflow (breaker, node memory, kill switch) by query.

Those workflows start on first use, so a cluster that never drained, never had an ambiguous
incident or never touched its kill switch has none: that reads as the entity's empty state, not
as an error. Every other failure is the caller's to report.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

T = TypeVar("T")
RPC_TIMEOUT = timedelta(seconds=30)


async def query_or_empty(client: Client, workflow_id: str, query: Callable[[Any], T], empty: T,
                         rpc_timeout: timedelta = RPC_TIMEOUT) -> T:
    """`query` on the workflow `workflow_id`, or `empty` when that workflow was never started."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        result: T = await handle.query(query, rpc_timeout=rpc_timeout)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return empty
        raise
    return result
