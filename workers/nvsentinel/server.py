"""The network side of the NVSentinel integration: a gRPC platform connector and a CloudEvents endpoint.

NVSentinel can send its health events out in two ways that need no change on its side, and goodput
receives both (docs/nvsentinel.md):

- gRPC: NVSentinel's `platformConnector.grpcSinkConnector` calls
  `datamodels.PlatformConnector/HealthEventOccurredV1` (workers/nvsentinel/grpc_receiver.py).
- HTTP: its event exporter POSTs CloudEvents 1.0 in structured mode, and logs in with OAuth 2.0
  client credentials against this server's token endpoint (workers/nvsentinel/http_receiver.py).

Both listen on loopback by default, share one `NvSentinelIntake` (so one deduplication window
covers both), and bound what they hold: the message size and the number of requests in flight.
This module starts the enabled ones beside the worker.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from activities.adapters.nvsentinel import NvSentinelIntake, TokenReviewer
from goodput.detect.nvsentinel import NvSentinelSettings, read_token_file
from goodput.detect.watch import AnomalySink, OptInRule
from goodput.extras import require
from goodput.scheduler import Scheduler
from workers.nvsentinel.http_receiver import NvSentinelHttpServer

if TYPE_CHECKING:
    from workers.nvsentinel.grpc_receiver import NvSentinelGrpcServer

log = logging.getLogger("goodput.nvsentinel")


def receiver_tokens(settings: NvSentinelSettings) -> tuple[str, ...]:
    """Every accepted token: those configured and the one in `token_file` (read now)."""
    tokens = [t.get_secret_value() for t in settings.tokens]
    if settings.token_file is not None:
        tokens.append(read_token_file(settings.token_file))
    return tuple(tokens)


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
            if self.http.has_oauth_clients:
                parts.append(f"OAuth token URL {self.http.token_url}")
        return "NVSentinel receivers: " + ", ".join(parts)


def _grpc_server(settings: NvSentinelSettings, intake: NvSentinelIntake, tokens: tuple[str, ...],
                 reviewer: TokenReviewer | None) -> NvSentinelGrpcServer:
    require("nvsentinel")  # gRPC is an extra: a lean install names it instead of failing on import
    from workers.nvsentinel.grpc_receiver import NvSentinelGrpcServer

    return NvSentinelGrpcServer(settings, intake, tokens, reviewer)


@contextlib.asynccontextmanager
async def serve_nvsentinel(settings: NvSentinelSettings, scheduler: Scheduler, sink: AnomalySink, cluster: str,
                           opt_in: OptInRule | None = None, *,
                           intake: NvSentinelIntake | None = None) -> AsyncIterator[NvSentinelReceivers]:
    """`async with serve_nvsentinel(settings.nvsentinel, scheduler, sink, settings.cluster) as receivers:`."""
    # The settings refuse this already; settings built around their validators must not open a door either.
    if open_ := settings.unprotected():
        raise ValueError("refusing to start the NVSentinel " + " and ".join(r for r, _ in open_) + " receiver "
                         "without a credential (nvsentinel.tokens, token_file, oauth_clients, token_review)")
    tokens = receiver_tokens(settings)
    intake = intake or NvSentinelIntake(settings, scheduler, sink, cluster, opt_in)
    async with contextlib.AsyncExitStack() as stack:
        reviewer = None
        if settings.grpc_enabled and settings.token_review.enabled:
            reviewer = TokenReviewer(settings.token_review)
            stack.push_async_callback(reviewer.aclose)
        grpc_server = _grpc_server(settings, intake, tokens, reviewer) if settings.grpc_enabled else None
        http_server = NvSentinelHttpServer(settings, intake, tokens) if settings.http_enabled else None
        for server in (grpc_server, http_server):
            if server is not None:
                await server.start()
                stack.push_async_callback(server.stop)
        yield NvSentinelReceivers(intake, grpc_server, http_server)


__all__ = [
    "NvSentinelHttpServer",
    "NvSentinelReceivers",
    "receiver_tokens",
    "serve_nvsentinel",
]
