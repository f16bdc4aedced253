"""The gRPC side of the NVSentinel integration: a platform connector NVSentinel's grpc sink calls.

NVSentinel's `platformConnector.grpcSinkConnector` calls
`datamodels.PlatformConnector/HealthEventOccurredV1` on a target `host:port`, optionally with
`authorization: Bearer <token>`. The legacy spelling `HealthEventOccuredV1` is served too, with
the same messages. Status codes: UNAUTHENTICATED without a valid token (checked before the body
is decoded), RESOURCE_EXHAUSTED over `max_message_bytes` (gRPC's own limit), INVALID_ARGUMENT for
a body that is not a HealthEvents message or has too many events, UNAVAILABLE when the scheduler
or Temporal failed (NVSentinel retries; redelivery is deduplicated). Events that can never be
used are rejected one by one and reported in the trailing metadata `goodput-rejected` (a
count) and `goodput-rejection` (the first reason): the call itself succeeds, since resending
cannot help.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import grpc
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError

from activities.adapters.nvsentinel import (
    LEGACY_METHOD,
    METHOD,
    PLATFORM_CONNECTOR,
    NvSentinelIntake,
    ProtoIncoming,
    TokenReviewer,
)
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import NvSentinelSettings, token_accepted
from workers.http_site import bracketed

log = logging.getLogger("goodput.nvsentinel")

REJECTED_KEY = "goodput-rejected"
REJECTION_KEY = "goodput-rejection"
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
if TYPE_CHECKING:  # the stubs make gRPC's handler types generic; the runtime classes are not
    _MaybeHandler: TypeAlias = "grpc.RpcMethodHandler[_Req, _Resp] | None"


def _ascii(text: str, limit: int = 300) -> str:
    """gRPC metadata values are printable ASCII."""
    return "".join(ch if " " <= ch <= "~" else "?" for ch in text[:limit])


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
        return f"{bracketed(self.settings.grpc_host)}:{self.port}"

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
            port = server.add_insecure_port(f"{bracketed(self.settings.grpc_host)}:{self.settings.grpc_port}")
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
