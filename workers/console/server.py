"""Runs the console (and /metrics) in the service's own event loop, on loopback by default.

`goodput up` and `goodput console` both enter `serve_console`; it refuses a non-loopback address
unless the site asked for one, and, where no console users are configured, writes an admin token
for the embedded default to a 0600 file (printed as a path, never as the secret). Both that token
and the generated session key are used only as goodput left them (goodput.private_files): a key
another user planted would sign their admin cookie.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from goodput.config import ConsoleSettings
from goodput.console.auth import ConsoleUser, TokenAuthenticator
from goodput.private_files import private_secret
from workers.console.app import build_app
from workers.console.context import ConsoleContext


class ConsoleConfigError(ValueError):
    """The console's settings would expose it or leave it without users."""


@dataclass(frozen=True)
class Served:
    url: str
    admin_token_file: Path | None  # set when the embedded default made its own admin token


def authenticator(settings: ConsoleSettings, data_dir: Path) -> tuple[TokenAuthenticator, Path | None]:
    secret = (settings.session_secret.get_secret_value().encode() if settings.session_secret else
              private_secret(data_dir / "console-session.key", lambda: secrets.token_hex(32).encode()))
    users = settings.users
    token_file = None
    if not users:
        token_file = data_dir / "console-admin.token"
        token = private_secret(token_file, lambda: secrets.token_urlsafe(32).encode()).decode()
        users = (ConsoleUser(name="admin", role="admin", token=token),)
    return TokenAuthenticator(users, secret), token_file


def check_bind(settings: ConsoleSettings) -> None:
    try:
        loopback = settings.host == "localhost" or ipaddress.ip_address(settings.host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not settings.allow_remote:
        raise ConsoleConfigError(f"console host {settings.host!r} is not loopback: set console.allow_remote = true "
                                 "(and configure console.users, behind TLS) to serve it beyond this machine")
    if not loopback and not settings.users:
        raise ConsoleConfigError("a console served beyond loopback needs configured console.users")


class _EmbeddedServer(uvicorn.Server):
    """uvicorn would take over SIGINT/SIGTERM; the service owns them and stops us itself."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def serve_console(ctx: ConsoleContext, settings: ConsoleSettings,
                        token_file: Path | None) -> AsyncIterator[Served]:
    check_bind(settings)
    config = uvicorn.Config(build_app(ctx), host=settings.host, port=settings.port, log_level="warning",
                            lifespan="off", access_log=False, server_header=False)
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises why it could not start (port taken, ...)
            raise ConsoleConfigError(f"console did not start on {settings.host}:{settings.port}")
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    try:
        yield Served(url=f"http://{host}:{port}", admin_token_file=token_file)
    finally:
        server.should_exit = True
        await task
