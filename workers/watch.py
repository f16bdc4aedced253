"""Temporal-backed sink and launcher for the watchers, and starting the cluster watcher.

The sink is the same signal-with-start path `goodput inject` uses, with the service's policy;
the launcher starts one `JobWatchWorkflow` per job attempt and treats "already started" (or
already finished) as done, so every scan can ask again safely.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

from opentelemetry import trace
from opentelemetry.metrics import Meter
from opentelemetry.trace import Tracer
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from goodput.detect.logtail import TailCursor
from goodput.detect.watch import WatchCheckpoint, WatchClusterInput, WatchJobInput
from goodput.metric_series import anomaly_labels
from goodput.models import Anomaly, IncidentKey, LogMark
from goodput.recover.policy import Policy
from goodput.service.incidents import FOLD_MAX, IncidentService, InjectResult, ServiceUnavailableError
from workers.telemetry import instruments
from workflows.recovery import RecoveryWorkflow
from workflows.watch import ClusterWatchWorkflow, JobWatchWorkflow, cluster_watch_id, job_watch_id

log = logging.getLogger("goodput.watch")
HANDOVER_TIMEOUT = timedelta(seconds=5)


class IncidentSink:
    """Where detectors send anomalies. `policy` is the service's own when the sink runs in the
    service (its watchers and receivers); None in a reporter that is not (a node agent): its
    incidents then ask the service for its policy.

    Anomalies of one incident fold while a delivery for it is in flight: the first goes at once,
    those that arrive meanwhile go together as the next delivery (one `anomalies` signal, which the
    incident folds one by one exactly as it folds `anomaly`), so a burst of ten detections for one
    job costs the incident two signals and two workflow tasks, not ten (#29; the pattern of
    activities.adapters.update_batch). Each `submit` still returns only once its own anomaly was
    delivered, and fails with its delivery's error."""

    def __init__(self, service: IncidentService, policy: Policy | None, meter: Meter | None = None,
                 tracer: Tracer | None = None) -> None:
        self._service = service
        self._policy = policy
        self._metrics = instruments(meter)
        self._tracer = tracer or trace.get_tracer("goodput.detect")
        self._waiting: dict[str, list[tuple[Anomaly, asyncio.Future[InjectResult]]]] = {}
        self._in_flight: set[str] = set()
        self._senders: set[asyncio.Task[None]] = set()

    async def submit(self, anomaly: Anomaly) -> None:
        await self.deliver(anomaly)

    async def deliver(self, anomaly: Anomaly) -> InjectResult:
        """`submit`, returning what the service answered for the delivery that carried `anomaly`."""
        labels = anomaly_labels(anomaly.source, anomaly.kind)
        self._metrics.detection_latency.record(
            max(0.0, (anomaly.detected_at - anomaly.observed_at).total_seconds()), labels)
        # The root of the incident's trace: the client's tracing interceptor carries it into the
        # workflow it starts or signals, and on into every activity.
        with self._tracer.start_as_current_span("goodput.anomaly", attributes={
                "goodput.incident_id": anomaly.incident_key.workflow_id, "goodput.anomaly_id": anomaly.id,
                "goodput.cluster": anomaly.cluster, "goodput.job_id": anomaly.job_id,
                "goodput.job_attempt": anomaly.job_attempt, "goodput.source": anomaly.source.value,
                "goodput.kind": anomaly.kind.value}):
            result = await self._folded(anomaly)
        self._metrics.submit_latency.record(
            max(0.0, (datetime.now(UTC) - anomaly.detected_at).total_seconds()), labels)
        self._metrics.anomalies.add(1, labels)
        if result.new_incident:
            self._metrics.incidents_opened.add(1, {"source": labels["source"]})
        if result.note:
            log.info("anomaly %s for %s: %s", anomaly.id, result.incident_id, result.note)
        return result

    async def _folded(self, anomaly: Anomaly) -> InjectResult:
        incident = anomaly.incident_key.workflow_id
        if incident not in self._in_flight:
            self._in_flight.add(incident)
            try:
                return await self._service.inject(anomaly, self._policy)
            finally:
                self._next(incident)
        waiting: asyncio.Future[InjectResult] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(incident, []).append((anomaly, waiting))
        return await waiting

    def _next(self, incident: str) -> None:
        """The delivery for `incident` ended: send what waited for it, or mark none in flight."""
        batch = [(a, f) for a, f in self._waiting.pop(incident, []) if not f.done()]  # not the abandoned
        if not batch:
            self._in_flight.discard(incident)
            return
        if len(batch) > FOLD_MAX:
            self._waiting[incident] = batch[FOLD_MAX:]
            batch = batch[:FOLD_MAX]
        sender = asyncio.get_running_loop().create_task(self._send(incident, batch))
        self._senders.add(sender)
        sender.add_done_callback(self._senders.discard)

    async def _send(self, incident: str, batch: list[tuple[Anomaly, asyncio.Future[InjectResult]]]) -> None:
        try:
            result = await self._service.inject_batch([a for a, _ in batch], self._policy)
        except asyncio.CancelledError:  # the sink's loop is stopping: nobody may wait for ever
            _settle([*batch, *self._waiting.pop(incident, [])], ServiceUnavailableError("stopped while delivering"))
            self._in_flight.discard(incident)
            raise
        except Exception as err:  # each anomaly fails with its delivery's error, as alone it would
            _settle(batch, err)
        else:
            _settle(batch, result)
        self._next(incident)


def _settle(batch: list[tuple[Anomaly, asyncio.Future[InjectResult]]], outcome: InjectResult | Exception) -> None:
    for i, (_, waiting) in enumerate(batch):
        if waiting.done():
            continue
        if isinstance(outcome, Exception):
            waiting.set_exception(outcome)
        else:  # a batch that opened the incident opened it once
            waiting.set_result(outcome if i == 0 else outcome.model_copy(update={"new_incident": False}))


class TemporalWatchLauncher:
    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def launch(self, request: WatchJobInput) -> None:
        job = request.job
        # Already started, or already finished for this attempt: either way it is watched.
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self._client.start_workflow(
                JobWatchWorkflow.run, request, id=job_watch_id(request.cluster, job.job_id, job.restart_count),
                task_queue=self._task_queue, id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)


    async def delivered(self, key: IncidentKey) -> tuple[LogMark, ...]:
        handle = self._client.get_workflow_handle_for(RecoveryWorkflow.run, key.workflow_id)
        try:
            return await handle.query(RecoveryWorkflow.log_marks, rpc_timeout=HANDOVER_TIMEOUT)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                log.warning("log marks of %s not read: %s", key.workflow_id, err)
        except WorkflowQueryFailedError as err:  # an incident from before log marks existed
            log.warning("log marks of %s not read: %s", key.workflow_id, err)
        return ()

    async def handover(self, cluster: str, job_id: str, attempt: int, wait_s: float) -> tuple[TailCursor, ...]:
        """Where the watcher of `attempt` stopped reading.

        It ends by itself soon after its job attempt ends and returns exact cursors; wait for
        that. If it does not end in time, stop it and take its last heartbeated cursors (up to a
        heartbeat interval old: a few of its last lines may then be read again).
        """
        handle = self._client.get_workflow_handle_for(JobWatchWorkflow.run, job_watch_id(cluster, job_id, attempt))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        try:
            while True:
                described = await handle.describe(rpc_timeout=HANDOVER_TIMEOUT)
                if described.status == WorkflowExecutionStatus.COMPLETED:
                    return (await handle.result(rpc_timeout=HANDOVER_TIMEOUT)).cursors
                if described.status != WorkflowExecutionStatus.RUNNING:
                    return ()
                if loop.time() >= deadline:
                    break
                await asyncio.sleep(0.2)
            await handle.cancel(rpc_timeout=HANDOVER_TIMEOUT)
            raw = await handle.describe(rpc_timeout=HANDOVER_TIMEOUT)
            for pending in raw.raw_description.pending_activities:
                if pending.heartbeat_details.payloads:
                    [details] = await self._client.data_converter.decode(
                        pending.heartbeat_details.payloads, [WatchCheckpoint])
                    return tuple(details.cursors)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                log.warning("cursor handover from %s attempt %s failed: %s", job_id, attempt, err)
        return ()


async def start_cluster_watch(client: Client, task_queue: str, request: WatchClusterInput) -> str:
    handle = await client.start_workflow(
        ClusterWatchWorkflow.run, request, id=cluster_watch_id(request.cluster), task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
    return handle.id
