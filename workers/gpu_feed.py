"""The service's side of the agents' GPU feed: `POST /v1/gpu-samples` and the sink that explains with it.

The endpoint shares the heartbeat listener and its credential: a report is authenticated by the
node's own token (an HMAC of the node's name), so a node reports for itself and for no other. The
body is read only up to `MAX_REPORT_BYTES` and validated by `goodput.detect.gpu_feed.GpuReport`
(strict, bounded), and every refusal is a typed JSON 4xx (or 503 when the store is full of nodes),
never a crash. Samples go to the process's `GpuSampleStore`.

`GpuEvidenceSink` stands in front of the incident sink of every watcher and receiver
(`evidence_sink`): a straggler or hang anomaly on its way to the incident is explained
(`goodput.detect.gpu_explain`) by the samples of the nodes Slurm lists for the job. In the process
that holds the store it reads it directly; in any other (the Helm chart's worker and detectors
pods) it asks the liveness process through its own task queue (`workers.liveness_worker`), and not
at all when no process polls that queue. A slow or failing controller or liveness process, or no
samples, costs only the explanation: the anomaly goes on unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from temporalio.client import Client

from activities.gpu_evidence import JOB_LOOKUP_TIMEOUT_S, explained_by
from goodput.detect.gpu_explain import EXPLAINED
from goodput.detect.gpu_feed import MAX_REPORT_BYTES, GpuReport, GpuSampleStore
from goodput.detect.node_liveness import LivenessConfig
from goodput.detect.watch import AnomalySink
from goodput.models import Anomaly
from goodput.recover.policy import Policy
from goodput.scheduler import Scheduler
from workers.agent_requests import AgentRequestRefused, agent_json_body, refusal, require_node_token
from workers.client import TemporalIncidentService
from workers.liveness_worker import RemoteGpuExplainer
from workers.watch import IncidentSink

log = logging.getLogger("goodput.gpu_feed")
GPU_SAMPLES_PATH = "/v1/gpu-samples"
Explainer = Callable[[Anomaly], Awaitable[Anomaly | None]]
"""An anomaly explained elsewhere; None: nobody there to explain it."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def gpu_store_for(config: LivenessConfig) -> GpuSampleStore | None:
    """The process's store when the liveness listener runs (the agents report there), else None."""
    if not config.enabled:
        return None
    return GpuSampleStore(window=config.gpu_window, max_age_s=config.gpu_max_age_s, max_nodes=config.gpu_max_nodes)


def _first_error(err: ValidationError) -> str:
    first = err.errors(include_input=False, include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


class GpuFeedEndpoint:
    """`POST /v1/gpu-samples`: one node's report, its token proving the node."""

    def __init__(self, store: GpuSampleStore, cluster: str, secret: bytes, *,
                 clock: Callable[[], datetime] = _utcnow) -> None:
        self.store, self.cluster = store, cluster
        self._secret, self._clock = secret, clock
        self.accepted = self.rejected = 0

    def route(self) -> Route:
        return Route(GPU_SAMPLES_PATH, self._post, methods=["POST"])

    def _refuse(self, status: int, message: str) -> JSONResponse:
        self.rejected += 1
        return refusal(status, message)

    async def _post(self, request: Request) -> JSONResponse:
        try:
            body = await agent_json_body(request, MAX_REPORT_BYTES, "a GPU report")
            try:
                report = GpuReport.model_validate_json(body)
                node = report.checked_node()
            except ValidationError as err:
                raise AgentRequestRefused(400, f"bad GPU report: {_first_error(err)[:200]}") from err
            except ValueError as err:
                raise AgentRequestRefused(400, f"bad GPU report: {str(err)[:200]}") from err
            require_node_token(request, self._secret, self.cluster, report.cluster, node)
        except AgentRequestRefused as refused:
            return self._refuse(refused.status, refused.message)
        now = self._clock()
        if not self.store.put(node, now, [gpu.sample(node, now) for gpu in report.gpus]):
            return self._refuse(503, "too many nodes reporting GPUs")
        self.accepted += 1
        return JSONResponse({"node": node, "gpus": len(report.gpus)})


class GpuEvidenceSink:
    """An `AnomalySink` that adds the GPUs' evidence to straggler and hang anomalies, then passes on.

    With `store` (this process serves the feed) it reads the samples itself; without, it asks
    `elsewhere` (`RemoteGpuExplainer`)."""

    def __init__(self, inner: AnomalySink, store: GpuSampleStore | None, scheduler: Scheduler | None = None, *,
                 elsewhere: Explainer | None = None, clock: Callable[[], datetime] = _utcnow,
                 timeout_s: float = JOB_LOOKUP_TIMEOUT_S) -> None:
        self._inner, self._store, self._scheduler, self._elsewhere = inner, store, scheduler, elsewhere
        self._clock, self._timeout = clock, timeout_s
        self.explained = self.errors = 0

    async def submit(self, anomaly: Anomaly) -> None:
        if anomaly.kind in EXPLAINED:
            anomaly = await self._explained(anomaly)
        await self._inner.submit(anomaly)

    async def _explained(self, anomaly: Anomaly) -> Anomaly:
        try:
            if self._store is not None and self._scheduler is not None:
                if not len(self._store):
                    return anomaly
                found = await explained_by(self._store, self._scheduler, anomaly, self._clock(),
                                           timeout_s=self._timeout)
            elif self._elsewhere is not None:
                found = await self._elsewhere(anomaly) or anomaly
            else:
                return anomaly
        except Exception as err:  # the explanation is a bonus; the anomaly itself must go on
            self.errors += 1
            log.warning("no GPU evidence for %s of job %s: %s: %s", anomaly.kind, anomaly.job_id,
                        type(err).__name__, err)
            return anomaly
        if found != anomaly:
            self.explained += 1
        return found


def evidence_sink(client: Client, task_queue: str, policy: Policy | None, scheduler: Scheduler, *,
                  gpu_samples: GpuSampleStore | None) -> GpuEvidenceSink:
    """The sink watchers and receivers submit through: incidents on `task_queue`, stragglers and
    hangs explained by this process's `gpu_samples`, or by the liveness process's when None."""
    inner = IncidentSink(TemporalIncidentService(client, task_queue), policy)
    if gpu_samples is not None:
        return GpuEvidenceSink(inner, gpu_samples, scheduler)
    return GpuEvidenceSink(inner, None, elsewhere=RemoteGpuExplainer(client, task_queue))
