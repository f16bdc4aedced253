"""The Temporal-backed `IncidentService`: how detectors, the CLI and the console reach incidents.

Every anomaly goes through `inject` (workers.incident_delivery): a signal-with-start on the
incident's workflow id, so concurrent detectors that see the same failure converge on one incident,
and a plain signal once this process knows the incident open. A closed incident is never reopened
by late evidence for the same job attempt (REJECT_DUPLICATE): the job has moved on to a new
attempt, and that attempt gets its own incident.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import UTC, timedelta
from pathlib import Path

from opentelemetry.trace import Tracer
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import (
    Client,
    RPCError,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCStatusCode, TLSConfig

from activities.adapters.entity_query import query_or_empty
from activities.adapters.kill_switch import TemporalKillSwitch
from activities.adapters.trust import TemporalTrustRecord
from goodput.config import Settings, TemporalTlsSettings
from goodput.diagnose.node_memory import NodeStanding
from goodput.identifiers import validate_cluster, validate_node_name
from goodput.models import Anomaly, Mode, OperatorDecision
from goodput.recover.breaker import BreakerState
from goodput.recover.incident import Decision, IncidentReport, WaitingStep
from goodput.recover.kill_switch import KillSwitchState
from goodput.recover.lifecycle import IncidentState
from goodput.recover.node_health import NodeHealthState, return_refusal
from goodput.recover.node_incident import NodeIncidentState, node_incident_id
from goodput.recover.policy import Policy
from goodput.recover.trust import AutonomyPolicy, RuleAutonomy, RuleSummary
from goodput.service.incidents import (
    DecisionRejectedError,
    IncidentSummary,
    InjectResult,
    ServiceUnavailableError,
    TemporalStartingError,
    UnknownIncidentError,
)
from workers.incident_delivery import RPC_TIMEOUT as RPC_TIMEOUT  # the console imports it from here
from workers.incident_delivery import IncidentDelivery
from workflows import search
from workflows.breaker import DrainBreakerWorkflow, breaker_workflow_id
from workflows.kill_switch import kill_switch_workflow_id
from workflows.node_health import NodeHealthWorkflow, node_health_workflow_id
from workflows.node_incident import NodeIncidentWorkflow
from workflows.node_memory import NodeMemoryWorkflow, node_memory_workflow_id
from workflows.recovery import RecoveryWorkflow
from workflows.trust import trust_workflow_id


async def connect(address: str, namespace: str = "default", tracer: Tracer | None = None, *,
                  tls: TLSConfig | bool = False, api_key: str | None = None) -> Client:
    """A client whose workflow starts, signals and queries carry the caller's trace context, and
    whose workers (built on it) continue it in workflow and activity spans: one recovery, one
    trace. Without a configured OpenTelemetry tracer provider the spans cost nothing."""
    try:
        return await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter,
                                    interceptors=[TracingInterceptor(tracer)], tls=tls, api_key=api_key)
    except RuntimeError as err:  # the Rust client's text is its transport's internals: keep the reason
        reason = connect_reason(str(err))
        text = f"cannot reach Temporal at {address}{f' ({reason})' if reason else ''}. Is `goodput up` running?"
        if starting(str(err)):
            raise TemporalStartingError(text, reason=reason) from err
        raise ServiceUnavailableError(text) from err


def starting(text: str) -> bool:
    """Whether the Rust client's connect error is one a starting server gives: no gRPC status at
    all (refused, reset: the transport failed) or UNAVAILABLE ("Frontend is not healthy yet").
    Any other status (UNAUTHENTICATED, PERMISSION_DENIED, …) is an answer that waiting won't change."""
    return "Status { code: " not in text or "Status { code: Unavailable" in text


def connect_reason(text: str) -> str:
    """The OS's reason from the Rust client's connect error (`message: "Connection refused"`), or
    nothing: its transport chain (tonic::transport::Error(Transport, ConnectError(...))) means
    nothing to an operator."""
    start = text.find('message: "')
    if start < 0:
        return ""
    reason = text[start + 10:start + 110].split('"', 1)[0]
    return reason if reason.isprintable() else ""


def tls_config(settings: TemporalTlsSettings, api_key: bool) -> TLSConfig | bool:
    """The client's TLS from settings: the CA and, for mTLS, the client pair, read now so a
    missing or unreadable file is one clear error at start-up rather than a handshake failure."""
    if not settings.enabled:
        return api_key  # an API key is never sent in the clear: it turns TLS on with the system CAs

    def read(path: Path | None, what: str) -> bytes | None:
        if path is None:
            return None
        try:
            return path.expanduser().read_bytes()
        except OSError as err:
            raise ServiceUnavailableError(f"temporal_tls.{what} {path}: {err.strerror or err}") from err

    return TLSConfig(server_root_ca_cert=read(settings.ca_file, "ca_file"),
                     client_cert=read(settings.cert_file, "cert_file"),
                     client_private_key=read(settings.key_file, "key_file"),
                     domain=settings.server_name or None)


async def connect_from(settings: Settings, tracer: Tracer | None = None) -> Client:
    """`connect` with the deployment's address, namespace, TLS and API key."""
    key = settings.temporal_api_key.get_secret_value() if settings.temporal_api_key else None
    return await connect(settings.temporal_address, settings.namespace, tracer,
                         tls=tls_config(settings.temporal_tls, api_key=key is not None), api_key=key)


def waiting_steps(pending: Iterable[PendingActivityInfo]) -> tuple[WaitingStep, ...]:
    """The steps a running incident waits for, with the failure Temporal is retrying, if any: a
    requeue retried while slurmctld is down says so here instead of looking stuck."""
    steps = []
    for activity in pending:
        failure = activity.last_failure.message if activity.HasField("last_failure") else ""
        next_at = (activity.next_attempt_schedule_time.ToDatetime(tzinfo=UTC)
                   if activity.HasField("next_attempt_schedule_time") else None)
        steps.append(WaitingStep(step=activity.activity_type.name or "?", attempt=max(activity.attempt, 1),
                                 last_failure=" ".join(failure.split())[:600], next_attempt_at=next_at))
    return tuple(steps)


def summary_of(wf: WorkflowExecution) -> IncidentSummary:
    """An incident as its search attributes describe it (no history read)."""
    attrs = wf.typed_search_attributes
    return IncidentSummary(
        incident_id=wf.id, job_id=attrs.get(search.JOB_ID) or "", cluster=attrs.get(search.CLUSTER) or "",
        state=attrs.get(search.STATE) or "", mode=attrs.get(search.MODE) or "",
        category=attrs.get(search.CATEGORY) or "", culprit_nodes=tuple(attrs.get(search.CULPRIT_NODES) or ()),
        outcome=attrs.get(search.OUTCOME) or "", started_at=wf.start_time, closed_at=wf.close_time,
        running=wf.status == WorkflowExecutionStatus.RUNNING,
        node_incidents=tuple(attrs.get(search.NODE_INCIDENTS) or ()))


class TemporalIncidentService:
    def __init__(self, client: Client, task_queue: str, *, index: bool = True) -> None:
        self._client = client
        self._task_queue = task_queue
        self._delivery = IncidentDelivery(client, task_queue, index=index)

    async def inject(self, anomaly: Anomaly, policy: Policy | None, mode: Mode | None = None) -> InjectResult:
        return await self.inject_batch([anomaly], policy, mode)

    async def inject_batch(self, anomalies: Sequence[Anomaly], policy: Policy | None,
                           mode: Mode | None = None) -> InjectResult:
        """Several anomalies of one incident in one delivery (workers.incident_delivery)."""
        return await self._delivery.deliver(anomalies, policy, mode)

    async def list_incidents(self, limit: int = 50, cluster: str | None = None) -> Sequence[IncidentSummary]:
        summaries: list[IncidentSummary] = []
        query = "WorkflowType = 'RecoveryWorkflow'"
        if cluster is not None:
            query += f" AND {search.CLUSTER.name} = '{validate_cluster(cluster)}'"
        try:
            async for wf in self._client.list_workflows(query, limit=limit, rpc_timeout=RPC_TIMEOUT):
                summaries.append(summary_of(wf))
        except RPCError as err:
            raise ServiceUnavailableError(f"cannot list incidents: {err}") from err
        return summaries

    async def node_health(self, cluster: str, limit: int = 500) -> tuple[NodeHealthState, ...]:
        """The return-to-service state of every node goodput drained on the cluster, newest first
        per node (a running workflow is queried, a finished one read from its result)."""
        prefix = node_health_workflow_id(validate_cluster(cluster), "")
        query = f"WorkflowType = 'NodeHealthWorkflow' AND WorkflowId STARTS_WITH '{prefix}'"
        states: dict[str, NodeHealthState] = {}
        try:
            async for wf in self._client.list_workflows(query, limit=limit, rpc_timeout=RPC_TIMEOUT):
                if wf.id in states:
                    continue  # an older run of the same node's workflow
                handle = self._client.get_workflow_handle_for(NodeHealthWorkflow.run, wf.id, run_id=wf.run_id)
                if wf.status == WorkflowExecutionStatus.RUNNING:
                    states[wf.id] = await handle.query(NodeHealthWorkflow.status, rpc_timeout=RPC_TIMEOUT)
                elif wf.status == WorkflowExecutionStatus.COMPLETED:
                    states[wf.id] = await handle.result(rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            raise ServiceUnavailableError(f"cannot list node health: {err}") from err
        return tuple(states.values())

    async def node_incidents(self, cluster: str | None = None, limit: int = 200,
                             timeout_s: float = 3.0) -> tuple[NodeIncidentState, ...]:
        """One fault, many jobs: the newest node incidents (of `cluster`, or all), each with every
        job incident it linked. A running one is queried, a finished one read from its result; a
        run that continued as new is skipped (its successor carries its state), and so is one
        that cannot answer within `timeout_s` (its workers are down): its incidents then show as
        unlinked, grouped by time, rather than holding up the list."""
        query = "WorkflowType = 'NodeIncidentWorkflow'"
        if cluster is not None:
            query += f" AND WorkflowId STARTS_WITH '{node_incident_id(validate_cluster(cluster), '')}'"
        try:
            runs = [wf async for wf in self._client.list_workflows(query, limit=limit, rpc_timeout=RPC_TIMEOUT)]
        except RPCError as err:
            raise ServiceUnavailableError(f"cannot list node incidents: {err}") from err
        gate = asyncio.Semaphore(16)

        async def read(wf: WorkflowExecution) -> NodeIncidentState | None:
            handle = self._client.get_workflow_handle_for(NodeIncidentWorkflow.run, wf.id, run_id=wf.run_id)
            async with gate:
                try:
                    if wf.status == WorkflowExecutionStatus.RUNNING:
                        return await asyncio.wait_for(handle.query(NodeIncidentWorkflow.status), timeout_s)
                    if wf.status == WorkflowExecutionStatus.COMPLETED:
                        return await asyncio.wait_for(handle.result(), timeout_s)
                except (RPCError, WorkflowQueryFailedError, TimeoutError):
                    pass
                return None

        return tuple(f for f in await asyncio.gather(*(read(wf) for wf in runs)) if f is not None)

    async def get(self, incident_id: str) -> IncidentReport:
        handle = self._client.get_workflow_handle_for(RecoveryWorkflow.run, incident_id)
        try:
            described = await handle.describe(rpc_timeout=RPC_TIMEOUT)
            if described.status == WorkflowExecutionStatus.COMPLETED:
                return await handle.result(rpc_timeout=RPC_TIMEOUT)
            report = await handle.query(RecoveryWorkflow.report, rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            raise _translate(err, incident_id) from err
        pending = waiting_steps(described.raw_description.pending_activities)
        return report.model_copy(update={"waiting": (*report.waiting, *pending)})

    async def decide(self, incident_id: str, decision: Decision) -> IncidentState:
        handle = self._client.get_workflow_handle_for(RecoveryWorkflow.run, incident_id)
        try:
            return await handle.execute_update(RecoveryWorkflow.decide, decision,
                                               rpc_timeout=timedelta(seconds=60))
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            raise DecisionRejectedError(f"{incident_id}: {message}") from err
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                closed = await self._closed_state(incident_id)
                if closed:
                    raise DecisionRejectedError(f"{incident_id}: incident is already {closed}") from err
            raise _translate(err, incident_id) from err

    async def request_node_return(self, cluster: str, node: str, by: OperatorDecision) -> str:
        """Ends the quarantine of a node goodput drained: its health check runs now and decides."""
        workflow_id = node_health_workflow_id(validate_cluster(cluster), validate_node_name(node))
        handle = self._client.get_workflow_handle_for(NodeHealthWorkflow.run, workflow_id)
        try:
            answer: str = await handle.execute_update(NodeHealthWorkflow.request_return, by,
                                                      rpc_timeout=RPC_TIMEOUT)
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            raise DecisionRejectedError(cause.message if isinstance(cause, ApplicationError) else str(cause)) from err
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:  # its workflow is over, or never was: say which
                ended = await self._ended_node_health(workflow_id)
                if ended is not None and return_refusal(ended):
                    raise DecisionRejectedError(return_refusal(ended)) from err
                raise UnknownIncidentError(f"goodput is not returning node {node} on {cluster} to service (it never "
                                           "drained it); `goodput nodes` lists them") from err
            raise _translate(err, workflow_id) from err
        return answer

    async def _ended_node_health(self, workflow_id: str) -> NodeHealthState | None:
        """The outcome of a node's last, finished health workflow: read by its id, not by listing
        every node's (a cluster's return-to-service history can be long)."""
        handle = self._client.get_workflow_handle_for(NodeHealthWorkflow.run, workflow_id)
        try:
            described = await handle.describe(rpc_timeout=RPC_TIMEOUT)
            if described.status != WorkflowExecutionStatus.COMPLETED:
                return None
            return await handle.result(rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise _translate(err, workflow_id) from err

    async def breaker_status(self, cluster: str) -> BreakerState:
        """The cluster's drain breaker; closed and empty when no drain was ever requested."""
        try:
            return await query_or_empty(self._client, breaker_workflow_id(cluster), DrainBreakerWorkflow.status,
                                        BreakerState(), rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            raise _translate(err, breaker_workflow_id(cluster)) from err

    async def node_standing(self, cluster: str) -> tuple[NodeStanding, ...]:
        """The cluster's memory of nodes; empty before its first ambiguous incident."""
        try:
            return await query_or_empty(self._client, node_memory_workflow_id(cluster),
                                        NodeMemoryWorkflow.standing, (), rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            raise _translate(err, node_memory_workflow_id(cluster)) from err

    async def kill_switch(self, cluster: str, engaged: bool | None = None,
                          by: OperatorDecision | None = None) -> KillSwitchState:
        """The cluster's kill switch; with `engaged` (and who and why), flipped first."""
        switch = TemporalKillSwitch(self._client, self._task_queue)
        try:
            if engaged is None or by is None:
                return await switch.read(cluster)
            return await switch.set(cluster, engaged, by)
        except RPCError as err:
            raise _translate(err, kill_switch_workflow_id(cluster)) from err

    async def trust(self, cluster: str) -> tuple[RuleSummary, ...]:
        """Each rule's track record on the cluster (goodput.recover.trust)."""
        try:
            return await TemporalTrustRecord(self._client, self._task_queue).read(cluster)
        except RPCError as err:
            raise _translate(err, trust_workflow_id(cluster)) from err

    async def trust_pin(self, cluster: str, rule: str, mode: Mode | None, by: OperatorDecision,
                        bar: AutonomyPolicy) -> RuleAutonomy:
        """Pins a rule to `mode` (None unpins); audited by the record."""
        try:
            return await TemporalTrustRecord(self._client, self._task_queue).pin(cluster, rule, mode, by, bar)
        except RPCError as err:
            raise _translate(err, trust_workflow_id(cluster)) from err

    async def breaker_reset(self, cluster: str, decision: OperatorDecision) -> None:
        handle = self._client.get_workflow_handle_for(DrainBreakerWorkflow.run, breaker_workflow_id(cluster))
        try:
            await handle.signal(DrainBreakerWorkflow.reset, decision, rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            raise _translate(err, breaker_workflow_id(cluster)) from err

    async def _closed_state(self, incident_id: str) -> str | None:
        """Updates to a closed workflow answer NOT_FOUND; say what really happened instead."""
        try:
            report = await self.get(incident_id)
        except UnknownIncidentError:
            return None
        return str(report.state)


def _translate(err: RPCError, incident_id: str) -> Exception:
    if err.status == RPCStatusCode.NOT_FOUND:
        return UnknownIncidentError(f"no incident {incident_id!r}; `goodput incidents` lists them")
    if err.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
        return ServiceUnavailableError(f"Temporal did not answer: {err.message}")
    if err.status == RPCStatusCode.FAILED_PRECONDITION:
        return DecisionRejectedError(f"{incident_id}: {err.message}")
    return ServiceUnavailableError(f"Temporal error for {incident_id}: {err.message}")
