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
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import uvicorn

from goodput.config import ConsoleSettings
from goodput.console.auth import ConsoleUser, TokenAuthenticator
from goodput.private_files import private_secret
from workers.console.app import LOGIN_LINK_PATH, build_app
from workers.console.context import ConsoleContext

EMBEDDED_ADMIN = "admin"


class ConsoleConfigError(ValueError):
    """The console's settings would expose it or leave it without users."""


# How long a stopping console waits for responses still being sent (live streams end at once on
# `ctx.closing`; this bounds anything else) before it cancels them: Ctrl-C stops within seconds.
GRACEFUL_SHUTDOWN_S = 2


@dataclass(frozen=True)
class Served:
    url: str
    admin_token_file: Path | None  # set when the embedded default made its own admin token
    # A one-time login link for that admin (embedded default only): printed, never logged.
    login_url: str | None = None


def authenticator(settings: ConsoleSettings, data_dir: Path) -> tuple[TokenAuthenticator, Path | None]:
    secret = (settings.session_secret.get_secret_value().encode() if settings.session_secret else
              private_secret(data_dir / "console-session.key", lambda: secrets.token_hex(32).encode()))
    users = settings.users
    token_file = None
    if not users:
        token_file = data_dir / "console-admin.token"
        token = private_secret(token_file, lambda: secrets.token_urlsafe(32).encode()).decode()
        users = (ConsoleUser(name=EMBEDDED_ADMIN, role="admin", token=token),)
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


class _RedactQueries(logging.Filter):
    """uvicorn's `access_log=False` only empties the access logger's handlers: a site that wires
    that logger to its own logging gets every request line again, a login link's token with it.
    Whatever handler is attached, a request line with a token keeps its path, not its query."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(arg.partition("?")[0] + "?[redacted]" if isinstance(arg, str) and "token=" in arg
                                else arg for arg in record.args)
        return True


_REDACT = _RedactQueries()


class _EmbeddedServer(uvicorn.Server):
    """uvicorn would take over SIGINT/SIGTERM; the service owns them and stops us itself."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def serve_console(ctx: ConsoleContext, settings: ConsoleSettings,
                        token_file: Path | None) -> AsyncIterator[Served]:
    check_bind(settings)
    access = logging.getLogger("uvicorn.access")
    if _REDACT not in access.filters:
        access.addFilter(_REDACT)
    # No access log: a one-time login link's token is in its URL.
    config = uvicorn.Config(build_app(ctx), host=settings.host, port=settings.port, log_level="warning",
                            lifespan="off", access_log=False, server_header=False,
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises why it could not start (port taken, ...)
            raise ConsoleConfigError(f"console did not start on {settings.host}:{settings.port}")
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    url = f"http://{host}:{port}"
    admin = ctx.auth.user_named(EMBEDDED_ADMIN) if token_file is not None else None
    login_url = (f"{url}{LOGIN_LINK_PATH}?token={ctx.login_links.issue(admin, datetime.now(UTC))}"
                 if admin is not None else None)
    try:
        yield Served(url=url, admin_token_file=token_file, login_url=login_url)
    finally:
        ctx.closing.set()  # live streams end now instead of holding the server open
        server.should_exit = True
        await task
