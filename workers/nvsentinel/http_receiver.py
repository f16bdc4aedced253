"""The HTTP side of the NVSentinel integration: CloudEvents from NVSentinel's event exporter, and its OAuth login.

NVSentinel's event exporter POSTs CloudEvents 1.0 in structured mode
(`application/cloudevents+json`), the event under `data.healthEvent`. 401 without a valid
token, 415 for another content type, 413 over `max_message_bytes`, 400 for a body that is not a
CloudEvent carrying a health event, 422 for an event that cannot be used (malformed, a node
Slurm does not know), 503 with Retry-After when the scheduler or Temporal failed. The exporter
always logs in with OAuth 2.0 client credentials; with `oauth_clients` configured this server
is its token endpoint too (`POST <oauth_token_path>`), minting tokens the events endpoint accepts.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from activities.adapters.nvsentinel import JsonIncoming, NvSentinelIntake, Received
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
from workers.http_site import Listener, application, content_length, content_type, json_error, read_body

log = logging.getLogger("goodput.nvsentinel")

RETRY_AFTER_S = 5
MAX_TOKEN_REQUEST = 8192


class NvSentinelHttpServer:
    """`POST <http_path>` (CloudEvents), `POST <oauth_token_path>` (when OAuth clients are configured)
    and `GET /healthz` on `http_host:http_port`."""

    def __init__(self, settings: NvSentinelSettings, intake: NvSentinelIntake, tokens: Sequence[str]) -> None:
        self.settings = settings
        self._intake = intake
        self._tokens = tuple(tokens)
        self._clients = {client: secret.get_secret_value() for client, secret in settings.oauth_clients.items()}
        self._clients.update({client: read_token_file(path) for client, path in settings.oauth_client_files.items()})
        self._slots = asyncio.Semaphore(settings.max_concurrent_requests)
        routes = [Route(settings.http_path, self._events, methods=["POST"])]
        if self._clients:
            routes.append(Route(settings.oauth_token_path, self._token, methods=["POST"]))
        self.app = application(routes)
        self._listener = Listener(self.app, "NVSentinel HTTP receiver", settings.http_host, settings.http_port)

    @property
    def port(self) -> int:
        return self._listener.port

    @property
    def url(self) -> str:
        """What NVSentinel's event exporter should POST to."""
        return f"{self._listener.url}{self.settings.http_path}"

    async def start(self) -> None:
        if await self._listener.start():
            log.info("NVSentinel CloudEvents receiver on %s", self.url)

    async def stop(self) -> None:
        await self._listener.stop()

    @property
    def has_oauth_clients(self) -> bool:
        return bool(self._clients)

    @property
    def token_url(self) -> str:
        """What NVSentinel's event exporter should use as its OIDC tokenUrl."""
        return f"{self._listener.url}{self.settings.oauth_token_path}"

    def _authorized(self, header: str | None) -> bool:
        """A configured token, or an access token minted for a configured OAuth client; with
        neither configured, no one: loopback is not an identity."""
        if not self._tokens and not self._clients:
            return False
        if self._tokens and token_accepted(header, self._tokens):
            return True
        scheme, _, token = (header or "").strip().partition(" ")
        return (bool(self._clients) and scheme.lower() == "bearer"
                and access_token_valid(token.strip(), self._clients, datetime.now(UTC)))

    async def _token(self, request: Request) -> JSONResponse:
        """OAuth 2.0 client credentials (RFC 6749 4.4): the client authenticates with HTTP Basic or
        form fields and gets a bearer token for the events endpoint."""
        no_store = {"Cache-Control": "no-store", "Pragma": "no-cache"}
        declared = content_length(request)
        if declared is not None and declared > MAX_TOKEN_REQUEST:
            return json_error(413, f"a token request is at most {MAX_TOKEN_REQUEST} bytes")
        if content_type(request) != "application/x-www-form-urlencoded":
            return JSONResponse({"error": "invalid_request",
                                      "error_description": "send application/x-www-form-urlencoded"}, status_code=400)
        body = await read_body(request, MAX_TOKEN_REQUEST)
        try:
            fields = urllib.parse.parse_qs(body.decode("utf-8"), max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        form = {key: values[0] for key, values in fields.items() if values}
        if form.get("grant_type") != "client_credentials":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400, headers=no_store)
        client = client_credentials(form, request.headers.get("Authorization"), self._clients)
        if client is None:
            log.warning("NVSentinel: OAuth token refused (invalid client credentials)")
            return JSONResponse({"error": "invalid_client"}, status_code=401,
                                     headers={**no_store, "WWW-Authenticate": 'Basic realm="goodput"'})
        token, expires_in = mint_access_token(client, self._clients[client], datetime.now(UTC),
                                              self.settings.oauth_token_ttl_s)
        answer: dict[str, Any] = {"access_token": token, "token_type": "Bearer", "expires_in": expires_in}
        if form.get("scope"):
            answer["scope"] = form["scope"][:200]
        return JSONResponse(answer, headers=no_store)

    async def _events(self, request: Request) -> JSONResponse:
        if not self._authorized(request.headers.get("Authorization")):
            return json_error(401, "missing or invalid token: send 'Authorization: Bearer <token>'",
                          {"WWW-Authenticate": 'Bearer realm="goodput"'})
        media = content_type(request)
        if media != CLOUDEVENTS_TYPE:
            return json_error(415, f"unsupported content type {media[:100]!r}: send one CloudEvent "
                               f"in structured mode as {CLOUDEVENTS_TYPE}")
        limit = self.settings.max_message_bytes
        declared = content_length(request)
        if declared is not None and declared > limit:
            return json_error(413, f"body is {declared} bytes (limit {limit})")
        async with self._slots:
            body = await read_body(request, limit)  # never read past the limit, chunked or not
            try:
                cloud_event = parse_cloudevent(body)
            except CloudEventError as err:
                return json_error(400, str(err))
            del body
            received = await self._intake.receive([JsonIncoming(cloud_event.event)], "http")
        return self._answer(received)

    def _answer(self, received: Received) -> JSONResponse:
        if received.retry is not None:
            return json_error(503, received.retry, {"Retry-After": str(RETRY_AFTER_S)})
        if received.rejected:
            return json_error(422, received.rejected[0])
        return JSONResponse({"outcome": received.outcome.value, "anomalies": received.anomalies})
