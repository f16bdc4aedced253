"""Connecting to a Temporal server that listens but does not serve yet.

A dev server (or a frontend restarting) accepts connections a few seconds before it answers
("Frontend is not healthy yet"), longer under load or just after another stopped on the same
database. `goodput up` starts its server and then connects; `goodput worker` may be started beside
a server still coming up (systemd, a Kubernetes pod). Both wait for it, saying once why, instead of
exiting on the first refusal. A CI run showed the need: a test's first call failed on the unhealthy
frontend of a server that had just opened its port.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from goodput.service.incidents import TemporalStartingError
from workers.devserver import NotReadyError, wait_until_ready

_NOT_YET = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.NOT_FOUND, RPCStatusCode.DEADLINE_EXCEEDED)


async def ready_client(connecting: Callable[[], Awaitable[Client]], namespace: str) -> Client:
    """A client once the server answers for the namespace; NotReadyError while it cannot yet.

    A namespace not found counts as not yet: the dev server registers it after it starts serving."""
    try:
        client = await connecting()
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace), timeout=timedelta(seconds=5))
    except TemporalStartingError as err:
        raise NotReadyError(err.reason) from err
    except RPCError as err:
        if err.status in _NOT_YET:
            raise NotReadyError(err.message) from err
        raise
    return client


async def connect_when_ready(connecting: Callable[[], Awaitable[Client]], *, namespace: str, what: str,
                             say: Callable[[str], None], timeout_s: float) -> Client:
    """`ready_client`, retried for at most `timeout_s`; says once what it waits for."""
    return await wait_until_ready(lambda: ready_client(connecting, namespace), what=what,
                                  timeout_s=timeout_s, say=say)
