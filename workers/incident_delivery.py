"""How anomalies reach their incident: a signal-with-start the first time, a plain signal after.

A signal-with-start on the incident's workflow id is what makes concurrent detectors that see one
failure converge on one incident, and a closed incident refuse late evidence for the same job
attempt (REJECT_DUPLICATE: that attempt is over; the next one gets its own incident). But it costs
the server more than a signal to a running workflow: it resolves the namespace and the cluster's
metadata again (two more reads of its store), and the request carries the incident's whole start
input, its policy included. In a storm an incident hears ten anomalies or more, nearly all of them
after it opened (#29: the embedded store answers one request at a time). So a process that has
delivered to an incident once sends its later anomalies as a plain signal, and falls back to the
signal-with-start when the server no longer knows the run (closed, or gone past retention): the
outcome is then exactly the signal-with-start's. What is remembered is bounded and is only a
hint; nothing a job writes chooses another incident (the id is the anomaly's own incident key).
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from goodput.models import Anomaly, Mode
from goodput.recover.incident import RecoveryStart
from goodput.recover.policy import Policy
from goodput.service.incidents import FOLD_MAX, InjectResult, ServiceUnavailableError
from workflows import search
from workflows.recovery import RecoveryWorkflow

T = TypeVar("T")

# Every Temporal call of the incident service (workers.client) waits this long at most.
RPC_TIMEOUT = timedelta(seconds=10)
# A refused anomaly is retried for about 15 s in all before the detector's own retry takes over.
INJECT_ATTEMPTS = 7
# CANCELLED is how the SDK ends a call its own RPC_TIMEOUT expired ("Timeout expired"): a server too
# busy to answer in time, as in a storm; the workflow folds the anomaly once if the call did land.
RETRIED_STATUSES = frozenset({RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE,
                              RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED})
# Incidents this process delivered to and believes open, newest last: far more than a storm has
# open at once on one service, and a forgotten one only costs its next delivery the fuller call.
KNOWN_OPEN_MAX = 4096
CLOSED_NOTE = "incident already closed for this job attempt; evidence not added"


def inject_backoff_s(attempt: int) -> float:
    """0.25, 0.5, 1, 2, 4, 4 s, each with up to half again of jitter, so a storm's refused senders
    do not come back all at once."""
    base: float = min(4.0, 0.25 * 2.0 ** attempt)
    return base * (1 + random.random() / 2)  # noqa: S311 -- jitter, not secrets


async def _retried(call: Callable[[], Awaitable[T]]) -> T:
    """`call`, again after a back-off while the server sheds load; any other refusal, or the last
    attempt's, is the service's."""
    for attempt in range(INJECT_ATTEMPTS):
        try:
            return await call()
        except RPCError as err:
            if err.status not in RETRIED_STATUSES or attempt == INJECT_ATTEMPTS - 1:
                raise ServiceUnavailableError(f"Temporal refused the anomaly: {err}") from err
            await asyncio.sleep(inject_backoff_s(attempt))
    raise AssertionError("unreachable: the last attempt raises")


class IncidentDelivery:
    """Delivers one incident's anomalies (one, or several folded) to its RecoveryWorkflow."""

    def __init__(self, client: Client, task_queue: str, *, index: bool = True) -> None:
        self._client = client
        self._task_queue = task_queue
        self._index = index
        self._open: OrderedDict[str, None] = OrderedDict()

    async def deliver(self, anomalies: Sequence[Anomaly], policy: Policy | None,
                      mode: Mode | None = None) -> InjectResult:
        """One anomaly goes as the `anomaly` signal (every worker's RecoveryWorkflow knows it),
        several of one incident as one `anomalies` signal."""
        if not anomalies or len(anomalies) > FOLD_MAX:
            raise ValueError(f"a delivery carries 1 to {FOLD_MAX} anomalies, not {len(anomalies)}")
        key = anomalies[0].incident_key
        if any(a.incident_key != key for a in anomalies):
            raise ValueError("a delivery carries the anomalies of one incident")
        signal, args = ("anomaly", [anomalies[0]]) if len(anomalies) == 1 else ("anomalies", [list(anomalies)])
        incident = key.workflow_id
        if incident in self._open and await self._signalled(incident, signal, args):
            self._open.move_to_end(incident)
            return InjectResult(incident_id=incident, new_incident=False)
        # No policy: the reporter is not the service; the workflow asks its worker for the service's.
        start = RecoveryStart(key=key, policy=policy or Policy(), mode=mode, index=self._index,
                              policy_from_service=policy is None)
        try:
            handle = await _retried(lambda: self._client.start_workflow(
                RecoveryWorkflow.run, start, id=incident, task_queue=self._task_queue,
                start_signal=signal, start_signal_args=args,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=search.at_start(key, mode or start.policy.mode) if self._index else None,
                rpc_timeout=RPC_TIMEOUT))
        except WorkflowAlreadyStartedError:
            return InjectResult(incident_id=incident, new_incident=False, note=CLOSED_NOTE)
        self._remember(incident)
        # Only the raw SignalWithStart response says whether this call started the run; the SDK
        # keeps it on the handle without a public accessor.
        response = getattr(handle, "_start_workflow_response", None)
        return InjectResult(incident_id=incident, new_incident=bool(getattr(response, "started", False)))

    async def _signalled(self, incident: str, signal: str, args: list[Any]) -> bool:
        """Signals the incident's run; False (and forgotten) when the server no longer has it open."""
        handle = self._client.get_workflow_handle(incident)

        async def send() -> bool:
            try:
                await handle.signal(signal, args=args, rpc_timeout=RPC_TIMEOUT)
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
                return False
            return True

        if await _retried(send):
            return True
        self._open.pop(incident, None)
        return False

    def _remember(self, incident: str) -> None:
        self._open[incident] = None
        self._open.move_to_end(incident)
        while len(self._open) > KNOWN_OPEN_MAX:
            self._open.popitem(last=False)
