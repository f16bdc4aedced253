"""The network side of the NVSentinel integration: a gRPC platform connector and a CloudEvents endpoint.

NVSentinel can send its health events out in two ways that need no change on its side, and goodput
receives both (docs/nvsentinel.md):

- gRPC: NVSentinel's `platformConnector.grpcSinkConnector` calls
  `datamodels.PlatformConnector/HealthEventOccurredV1` on a target `host:port`, optionally with
  `authorization: Bearer <token>`. The legacy spelling `HealthEventOccuredV1` is served too, with
  the same messages. Status codes: UNAUTHENTICATED without a valid token (checked before the body
  is decoded), RESOURCE_EXHAUSTED over `max_message_bytes` (gRPC's own limit), INVALID_ARGUMENT for
  a body that is not a HealthEvents message or has too many events, UNAVAILABLE when the scheduler
  or Temporal failed (NVSentinel retries; redelivery is deduplicated). Events that can never be
  used are rejected one by one and reported in the trailing metadata `goodput-rejected` (a
  count) and `goodput-rejection` (the first reason): the call itself succeeds, since resending
  cannot help.
- HTTP: its event exporter POSTs CloudEvents 1.0 in structured mode
  (`application/cloudevents+json`), the event under `data.healthEvent`. 401 without a valid
  token, 415 for another content type, 413 over `max_message_bytes`, 400 for a body that is not a
  CloudEvent carrying a health event, 422 for an event that cannot be used (malformed, a node
  Slurm does not know), 503 with Retry-After when the scheduler or Temporal failed. The exporter
  always logs in with OAuth 2.0 client credentials; with `oauth_clients` configured this server
  is its token endpoint too (`POST <oauth_token_path>`), minting tokens the events endpoint accepts.

Both listen on loopback by default, share one `NvSentinelIntake` (so one deduplication window
covers both), and bound what they hold: the message size and the number of requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import grpc
from aiohttp import web
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError

from activities.adapters.nvsentinel import (
    LEGACY_METHOD,
    METHOD,
    PLATFORM_CONNECTOR,
    JsonIncoming,
    NvSentinelIntake,
    ProtoIncoming,
    Received,
    TokenReviewer,
)
from activities.adapters.nvsentinel_proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import (
    CLOUDEVENTS_TYPE,
    CloudEventError,
    NvSentinelSettings,
    access_token_valid,
    client_credentials,
    mint_access_token,
    parse_cloudevent,
    read_token_file,
    token_accepted,
)
from goodput.detect.watch import AnomalySink, OptInRule
from goodput.scheduler import Scheduler

log = logging.getLogger("goodput.nvsentinel")

HEALTH_PATH = "/healthz"
RETRY_AFTER_S = 5
REJECTED_KEY = "goodput-rejected"
REJECTION_KEY = "goodput-rejection"
MAX_TOKEN_REQUEST = 8192
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
if TYPE_CHECKING:  # the stubs make gRPC's handler types generic; the runtime classes are not
    _MaybeHandler: TypeAlias = "grpc.RpcMethodHandler[_Req, _Resp] | None"
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def receiver_tokens(settings: NvSentinelSettings) -> tuple[str, ...]:
    """Every accepted token: those configured and the one in `token_file` (read now)."""
    tokens = [t.get_secret_value() for t in settings.tokens]
    if settings.token_file is not None:
        tokens.append(read_token_file(settings.token_file))
    return tuple(tokens)


def _ascii(text: str, limit: int = 300) -> str:
    """gRPC metadata values are printable ASCII."""
    return "".join(ch if " " <= ch <= "~" else "?" for ch in text[:limit])


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# -- gRPC -------------------------------------------------------------------------------------------


def _decode(data: bytes) -> pb.HealthEvents | None:
    """None for bytes that are not a HealthEvents message (answered INVALID_ARGUMENT, not INTERNAL)."""
    try:
        return pb.HealthEvents.FromString(data)
    except (DecodeError, ValueError, RuntimeError):
        return None


class _TokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without an accepted bearer token before their body is decoded: a configured
    token, or (with `reviewer`) a ServiceAccount token the Kubernetes API server vouches for."""

    def __init__(self, tokens: Sequence[str], reviewer: TokenReviewer | None = None) -> None:
        self._tokens = tuple(tokens)
        self._reviewer = reviewer

        async def refuse(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "missing or invalid token: send 'authorization: Bearer <token>'")

        async def later(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the token could not be reviewed now; retry later")

        self._refusal: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(refuse)
        self._unavailable: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(later)

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_MaybeHandler[_Req, _Resp]]],
            handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[_Req, _Resp] | None:
        header: str | None = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization" and isinstance(value, str):
                header = value
                break
        if self._tokens and token_accepted(header, self._tokens):
            return await continuation(handler_call_details)
        scheme, _, token = (header or "").strip().partition(" ")
        if self._reviewer is not None and scheme.lower() == "bearer":
            verdict = await self._reviewer.check(token.strip())
            if verdict:
                return await continuation(handler_call_details)
            if verdict is None:
                return self._unavailable
        return self._refusal


class NvSentinelGrpcServer:
    """`datamodels.PlatformConnector` on `grpc_host:grpc_port` (0 picks a free port)."""

    def __init__(self, settings: NvSentinelSettings, intake: NvSentinelIntake, tokens: Sequence[str],
                 reviewer: TokenReviewer | None = None) -> None:
        self.settings = settings
        self._intake = intake
        self._tokens = tuple(tokens)
        self._reviewer = reviewer
        self._server: grpc.aio.Server | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the NVSentinel gRPC receiver is not started")
        return self._port

    @property
    def target(self) -> str:
        """What NVSentinel's grpcSinkConnector.target should say (host:port)."""
        return f"{_host(self.settings.grpc_host)}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        limit = self.settings.max_message_bytes
        server = grpc.aio.server(
            interceptors=[_TokenInterceptor(self._tokens, self._reviewer)] if self._tokens or self._reviewer else None,
            options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", 64 << 10),
                     ("grpc.max_concurrent_streams", self.settings.max_concurrent_requests),
                     ("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=self.settings.max_concurrent_requests)
        handlers = {name: grpc.unary_unary_rpc_method_handler(
                        self._health_events, request_deserializer=_decode,
                        response_serializer=empty_pb2.Empty.SerializeToString)
                    for name in (METHOD, LEGACY_METHOD)}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(PLATFORM_CONNECTOR, handlers),))
        try:
            port = server.add_insecure_port(f"{_host(self.settings.grpc_host)}:{self.settings.grpc_port}")
        except RuntimeError as err:
            raise OSError(f"cannot listen on {self.settings.grpc_host}:{self.settings.grpc_port}: {err}") from None
        if not port:
            raise OSError(f"cannot listen on {self.settings.grpc_host}:{self.settings.grpc_port}")
        await server.start()
        self._server, self._port = server, port
        log.info("NVSentinel gRPC receiver (platform connector) on %s", self.target)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=2.0)
        self._port = None

    async def _health_events(self, request: pb.HealthEvents | None,
                             context: grpc.aio.ServicerContext[Any, Any]) -> empty_pb2.Empty:
        if request is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the body is not a datamodels.HealthEvents message")
        limit = self.settings.max_events_per_batch
        if len(request.events) > limit:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{len(request.events)} events in one call (limit {limit})")
        received = await self._intake.receive([ProtoIncoming(e) for e in request.events], "grpc")
        if received.retry is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, received.retry)
        if received.rejected_total:
            context.set_trailing_metadata(((REJECTED_KEY, str(received.rejected_total)),
                                           (REJECTION_KEY, _ascii(received.rejected[0]))))
        return empty_pb2.Empty()


# -- HTTP (CloudEvents) ----------------------------------------------------------------------------


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


@web.middleware
async def _json_errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """aiohttp's own refusals (404, 405, 413 while reading) in the same JSON shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kept = {k: exc.headers[k] for k in ("Allow", "WWW-Authenticate", "Retry-After") if k in exc.headers}
        return _error(exc.status, exc.text or exc.reason, kept)


async def _plain_server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = "goodput"


class NvSentinelHttpServer:
    """`POST <http_path>` (CloudEvents), `POST <oauth_token_path>` (when OAuth clients are configured)
    and `GET /healthz` on `http_host:http_port`."""

    def __init__(self, settings: NvSentinelSettings, intake: NvSentinelIntake, tokens: Sequence[str]) -> None:
        self.settings = settings
        self._intake = intake
        self._tokens = tuple(tokens)
        self._clients = {client: secret.get_secret_value() for client, secret in settings.oauth_clients.items()}
        self._slots = asyncio.Semaphore(settings.max_concurrent_requests)
        self.app = web.Application(client_max_size=settings.max_message_bytes, middlewares=[_json_errors])
        self.app.on_response_prepare.append(_plain_server_header)
        self.app.router.add_post(settings.http_path, self._events)
        if self._clients:
            self.app.router.add_post(settings.oauth_token_path, self._token)
        self.app.router.add_get(HEALTH_PATH, self._health)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the NVSentinel HTTP receiver is not started")
        return self._port

    @property
    def url(self) -> str:
        """What NVSentinel's event exporter should POST to."""
        return f"http://{_host(self.settings.http_host)}:{self.port}{self.settings.http_path}"

    async def start(self) -> None:
        if self._runner is not None:
            return
        runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.settings.http_host, self.settings.http_port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        log.info("NVSentinel CloudEvents receiver on %s", self.url)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self._port = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    @property
    def token_url(self) -> str:
        """What NVSentinel's event exporter should use as its OIDC tokenUrl."""
        return f"http://{_host(self.settings.http_host)}:{self.port}{self.settings.oauth_token_path}"

    def _authorized(self, header: str | None) -> bool:
        """A configured token, or an access token minted for a configured OAuth client; with
        neither configured, anyone (the settings allow that only on loopback or deliberately)."""
        if not self._tokens and not self._clients:
            return True
        if self._tokens and token_accepted(header, self._tokens):
            return True
        scheme, _, token = (header or "").strip().partition(" ")
        return (bool(self._clients) and scheme.lower() == "bearer"
                and access_token_valid(token.strip(), self._clients, datetime.now(UTC)))

    async def _token(self, request: web.Request) -> web.Response:
        """OAuth 2.0 client credentials (RFC 6749 4.4): the client authenticates with HTTP Basic or
        form fields and gets a bearer token for the events endpoint."""
        no_store = {"Cache-Control": "no-store", "Pragma": "no-cache"}
        if request.content_length is not None and request.content_length > MAX_TOKEN_REQUEST:
            return _error(413, f"a token request is at most {MAX_TOKEN_REQUEST} bytes")
        if request.content_type != "application/x-www-form-urlencoded":
            return web.json_response({"error": "invalid_request",
                                      "error_description": "send application/x-www-form-urlencoded"}, status=400)
        body = await request.read()
        if len(body) > MAX_TOKEN_REQUEST:
            return _error(413, f"a token request is at most {MAX_TOKEN_REQUEST} bytes")
        try:
            fields = urllib.parse.parse_qs(body.decode("utf-8"), max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            return web.json_response({"error": "invalid_request"}, status=400)
        form = {key: values[0] for key, values in fields.items() if values}
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400, headers=no_store)
        client = client_credentials(form, request.headers.get("Authorization"), self._clients)
        if client is None:
            log.warning("NVSentinel: OAuth token refused (invalid client credentials)")
            return web.json_response({"error": "invalid_client"}, status=401,
                                     headers={**no_store, "WWW-Authenticate": 'Basic realm="goodput"'})
        token, expires_in = mint_access_token(client, self._clients[client], datetime.now(UTC),
                                              self.settings.oauth_token_ttl_s)
        answer: dict[str, Any] = {"access_token": token, "token_type": "Bearer", "expires_in": expires_in}
        if form.get("scope"):
            answer["scope"] = form["scope"][:200]
        return web.json_response(answer, headers=no_store)

    async def _events(self, request: web.Request) -> web.Response:
        if not self._authorized(request.headers.get("Authorization")):
            return _error(401, "missing or invalid token: send 'Authorization: Bearer <token>'",
                          {"WWW-Authenticate": 'Bearer realm="goodput"'})
        if request.content_type != CLOUDEVENTS_TYPE:
            return _error(415, f"unsupported content type {request.content_type[:100]!r}: send one CloudEvent "
                               f"in structured mode as {CLOUDEVENTS_TYPE}")
        limit = self.settings.max_message_bytes
        if request.content_length is not None and request.content_length > limit:
            return _error(413, f"body is {request.content_length} bytes (limit {limit})")
        async with self._slots:
            body = await request.read()  # bounded by client_max_size, chunked or not
            try:
                cloud_event = parse_cloudevent(body)
            except CloudEventError as err:
                return _error(400, str(err))
            del body
            received = await self._intake.receive([JsonIncoming(cloud_event.event)], "http")
        return self._answer(received)

    def _answer(self, received: Received) -> web.Response:
        if received.retry is not None:
            return _error(503, received.retry, {"Retry-After": str(RETRY_AFTER_S)})
        if received.rejected:
            return _error(422, received.rejected[0])
        return web.json_response({"outcome": received.outcome.value, "anomalies": received.anomalies})


# -- both, beside the worker ---------------------------------------------------------------------


class NvSentinelReceivers:
    """The enabled receivers around one intake; `grpc` / `http` are None when disabled."""

    def __init__(self, intake: NvSentinelIntake, grpc_server: NvSentinelGrpcServer | None,
                 http_server: NvSentinelHttpServer | None) -> None:
        self.intake = intake
        self.grpc = grpc_server
        self.http = http_server

    def describe(self) -> str:
        parts = []
        if self.grpc is not None:
            parts.append(f"gRPC at {self.grpc.target}")
        if self.http is not None:
            parts.append(f"CloudEvents at {self.http.url}")
            if self.http.settings.oauth_clients:
                parts.append(f"OAuth token URL {self.http.token_url}")
        return "NVSentinel receivers: " + ", ".join(parts)


@contextlib.asynccontextmanager
async def serve_nvsentinel(settings: NvSentinelSettings, scheduler: Scheduler, sink: AnomalySink, cluster: str,
                           opt_in: OptInRule | None = None, *,
                           intake: NvSentinelIntake | None = None) -> AsyncIterator[NvSentinelReceivers]:
    """`async with serve_nvsentinel(settings.nvsentinel, scheduler, sink, settings.cluster) as receivers:`."""
    tokens = receiver_tokens(settings)
    intake = intake or NvSentinelIntake(settings, scheduler, sink, cluster, opt_in)
    async with contextlib.AsyncExitStack() as stack:
        reviewer = None
        if settings.grpc_enabled and settings.token_review.enabled:
            reviewer = TokenReviewer(settings.token_review)
            stack.push_async_callback(reviewer.aclose)
        grpc_server = NvSentinelGrpcServer(settings, intake, tokens, reviewer) if settings.grpc_enabled else None
        http_server = NvSentinelHttpServer(settings, intake, tokens) if settings.http_enabled else None
        for server in (grpc_server, http_server):
            if server is not None:
                await server.start()
                stack.push_async_callback(server.stop)
        if grpc_server is not None and not tokens and reviewer is None:
            log.warning("the NVSentinel gRPC receiver accepts calls without a token (nvsentinel.tokens is empty)")
        if http_server is not None and not tokens and not settings.oauth_clients:
            log.warning("the NVSentinel HTTP receiver accepts events without a token (nvsentinel.tokens and "
                        "nvsentinel.oauth_clients are empty)")
        yield NvSentinelReceivers(intake, grpc_server, http_server)
