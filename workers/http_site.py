"""What goodput's small aiohttp endpoints (the log push server, NVSentinel's CloudEvents receiver)
share, so they answer alike: aiohttp's own refusals (404, 405, 413 while reading) in the same JSON
shape as the endpoints' errors, no version banner, a `/healthz`, and a listener that gives its
port back when binding fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

HEALTH_PATH = "/healthz"
_KEPT_HEADERS = ("Allow", "WWW-Authenticate", "Retry-After")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def bracketed(host: str) -> str:
    """A host as it goes into a URL (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def json_error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


@web.middleware
async def _json_errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: exc.headers[k] for k in _KEPT_HEADERS if k in exc.headers}
        return json_error(exc.status, exc.text or exc.reason, headers)


async def _plain_server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = "goodput"  # not the Python and aiohttp versions


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def application(max_body_bytes: int) -> web.Application:
    """An app with the shared error shape, server header and health route."""
    app = web.Application(client_max_size=max_body_bytes, middlewares=[_json_errors])
    app.on_response_prepare.append(_plain_server_header)
    app.router.add_get(HEALTH_PATH, _health)
    return app


class Listener:
    """One app on one host and port (0 picks a free one), started and stopped once each: the
    port, URL, start and stop every endpoint (push, heartbeats, NVSentinel's receiver) shares."""

    def __init__(self, app: web.Application, what: str, host: str, port: int) -> None:
        self._app = app
        self._what = what
        self._host = host
        self._wanted_port = port
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"the {self._what} is not started")
        return self._port

    @property
    def url(self) -> str:
        """`http://host:port` (IPv6 in brackets), once started."""
        return f"http://{bracketed(self._host)}:{self.port}"

    @property
    def started(self) -> bool:
        return self._runner is not None

    async def start(self) -> bool:
        """Binds and serves; False when it already was (start is idempotent)."""
        if self._runner is not None:
            return False
        runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._wanted_port).start()
        except BaseException:
            await runner.cleanup()  # a port already taken must not leave a half-open runner
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return True

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self._port = None
