"""The HTTP side of log push: Fluent Bit and Vector POST JSON lines here, anomalies go to the sink.

Everything about a body (auth, parsing, detection) lives in the pure `goodput.detect.push`; this module
only speaks HTTP, with status codes chosen for shippers: 4xx for what a retry cannot fix (bad
token, too large, wrong type, not JSON), 503 with Retry-After when the sink fails, because both
shippers retry 5xx and the retried batch maps to the same anomaly ids. A bad record is never a
5xx: it is listed in the 200 response's `rejected` and the rest of its batch is judged (a 5xx
would make the shipper resend the same bad record forever). The body is never read past
`max_body_bytes`, and at most `max_concurrent_requests` bodies are held at once.

`POST /v1/layout` takes the records of goodput's Slurm prolog and epilog (deploy/slurm/): one
node of one job attempt each, checked by `goodput.detect.push.layout`, kept in a `LayoutStore`
for attribution. The scripts never retry and never wait long, so every answer is final.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from activities.adapters.layout import LayoutStore, LayoutStoreFullError
from goodput.detect.push import (
    BodyTooLargeError,
    ParsedBatch,
    PushBodyError,
    PushConfig,
    PushRouter,
    Routed,
    authenticate,
    parse_batch,
    token_matches,
)
from goodput.detect.push.layout import MAX_LAYOUT_BODY, LayoutBodyError, node_layout, parse_layout
from goodput.detect.watch import AnomalySink
from goodput.identifiers import validate_cluster
from workers.http_site import Listener, application, content_length, content_type, json_error, read_body

log = logging.getLogger("goodput.push")

LOGS_PATH = "/v1/logs"
LAYOUT_PATH = "/v1/layout"
ACCEPTED_TYPES = frozenset({"application/json", "application/x-ndjson", "application/jsonl",
                            "application/x-jsonlines", "text/plain"})
RETRY_AFTER_S = 5
SUBMIT_TIMEOUT_S = 30.0  # shippers give up on a request after about this long anyway


def _utcnow() -> datetime:
    return datetime.now(UTC)


class PushServer:
    """`POST /v1/logs`, `POST /v1/layout` (with a layout store) and `GET /healthz` on the configured
    host and port (0 picks a free port)."""

    def __init__(self, config: PushConfig, sink: AnomalySink, cluster: str, *, router: PushRouter | None = None,
                 clock: Callable[[], datetime] = _utcnow, layouts: LayoutStore | None = None) -> None:
        self.config = config
        self.cluster = validate_cluster(cluster)  # a bad setting fails at startup, not on every request
        self._sink = sink
        self._router = router if router is not None else PushRouter(config)
        self._clock = clock
        self._slots = asyncio.Semaphore(config.max_concurrent_requests)
        # A threading lock, not an asyncio one: a cancelled request must not free the router while
        # its worker thread is still inside it.
        self._route_lock = threading.Lock()
        self._layouts = layouts
        routes = [Route(LOGS_PATH, self._logs, methods=["POST"])]
        if layouts is not None:
            routes.append(Route(LAYOUT_PATH, self._layout, methods=["POST"]))
        self.app = application(routes)
        self._listener = Listener(self.app, "push server", config.host, config.port)

    @property
    def port(self) -> int:
        """The bound port, once started."""
        return self._listener.port

    @property
    def url(self) -> str:
        return self._listener.url

    async def start(self) -> None:
        if await self._listener.start():
            log.info("log push listening on %s%s", self.url, LOGS_PATH)

    async def stop(self) -> None:
        await self._listener.stop()

    async def __aenter__(self) -> PushServer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # -- handlers -------------------------------------------------------------------------

    def _authorized(self, request: Request) -> bool:
        header = request.headers.get("Authorization")
        if header is not None:
            return authenticate(header, self.config)
        token = request.headers.get("X-Goodput-Token")
        return token is not None and token_matches(token.strip(), self.config)

    def _route(self, batch: ParsedBatch, detected_at: datetime) -> Routed:
        with self._route_lock:  # the detectors are stateful: one batch at a time
            return self._router.route_each(batch, detected_at)

    async def _logs(self, request: Request) -> JSONResponse:
        if not self._authorized(request):
            return json_error(401, "missing or invalid token: send 'Authorization: Bearer <token>'",
                          {"WWW-Authenticate": 'Bearer realm="goodput"'})
        media = content_type(request)
        if media not in ACCEPTED_TYPES:
            return json_error(415, f"unsupported content type {media[:100]!r}; "
                               f"send one of {', '.join(sorted(ACCEPTED_TYPES))}")
        limit = self.config.max_body_bytes
        declared = content_length(request)
        if declared is not None and declared > limit:
            return json_error(413, f"body is {declared} bytes (limit {limit})")
        async with self._slots:
            body = await read_body(request, limit)  # never read past the limit, chunked or not
            try:
                batch = await asyncio.to_thread(parse_batch, body, self.config, cluster=self.cluster,
                                                received_at=self._clock())
            except BodyTooLargeError as err:
                return json_error(413, str(err))
            except PushBodyError as err:
                return json_error(400, str(err))
            del body
            routed = await asyncio.to_thread(self._route, batch, self._clock())
        for key, failure in routed.failures:
            log.error("log push: the lines of job %s (attempt %d, host %s) could not be judged; rejected",
                      key.job_id, key.attempt, key.host, exc_info=failure)
        anomalies = routed.anomalies
        for anomaly in anomalies:
            try:
                async with asyncio.timeout(SUBMIT_TIMEOUT_S):
                    await self._sink.submit(anomaly)
            except Exception:
                log.warning("log push: could not submit anomaly %s for job %s; asking the shipper to retry",
                            anomaly.id, anomaly.job_id, exc_info=True)
                return json_error(503, "could not record the anomalies of this batch; retry later",
                              {"Retry-After": str(RETRY_AFTER_S)})
        rejected = sorted([*batch.rejected, *routed.rejected], key=lambda r: r.line)[:self.config.max_rejections]
        rejected_total = batch.rejected_total + len(routed.rejected)
        if rejected:
            log.info("log push: %d records accepted, %d rejected (first: line %d: %s)",
                     batch.accepted - len(routed.rejected), rejected_total, rejected[0].line, rejected[0].reason)
        result: dict[str, Any] = {
            "accepted": batch.accepted - len(routed.rejected),
            "rejected": [{"line": r.line, "reason": r.reason} for r in rejected],
            "rejected_total": rejected_total,
            "anomalies": len(anomalies),
        }
        return JSONResponse(result)

    async def _layout(self, request: Request) -> JSONResponse:
        if not self._authorized(request):
            return json_error(401, "missing or invalid token: send 'Authorization: Bearer <token>'",
                              {"WWW-Authenticate": 'Bearer realm="goodput"'})
        media = content_type(request)
        if media != "application/json":
            return json_error(415, f"unsupported content type {media[:100]!r}; send application/json")
        declared = content_length(request)
        if declared is not None and declared > MAX_LAYOUT_BODY:
            return json_error(413, f"body is {declared} bytes (limit {MAX_LAYOUT_BODY})")
        assert self._layouts is not None  # the route exists only with a store
        store = self._layouts
        async with self._slots:
            body = await read_body(request, MAX_LAYOUT_BODY)  # chunked too: no Content-Length said so first
            try:
                cluster, record = parse_layout(body, self.config, cluster=self.cluster)
                layout = await asyncio.to_thread(node_layout, record, self._clock())
            except LayoutBodyError as err:
                return json_error(400, str(err))
            write = store.put if record.event == "prolog" else store.end
            try:
                await asyncio.to_thread(write, cluster, layout)
            except LayoutStoreFullError as err:
                return json_error(409, str(err))
            except OSError:
                log.exception("layout push: could not store the %s record of job %s on %s",
                              record.event, record.job_id, record.node)
                return json_error(503, "could not store the layout record")
        return JSONResponse({"stored": record.event, "cluster": cluster, "job_id": layout.job_id,
                                  "attempt": layout.attempt, "node": layout.node, "node_index": layout.node_index,
                                  "node_count": layout.node_count})


def serve_push(config: PushConfig, sink: AnomalySink, cluster: str, *, router: PushRouter | None = None,
               clock: Callable[[], datetime] = _utcnow, layouts: LayoutStore | None = None) -> PushServer:
    """`async with serve_push(settings.push, sink, settings.cluster) as server:` listens inside the block."""
    return PushServer(config, sink, cluster, router=router, clock=clock, layouts=layouts)
