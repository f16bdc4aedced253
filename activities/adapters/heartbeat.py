"""The node agent's heartbeat: one small authenticated POST to the service every interval.

Its own loop, beside the agent's tick: a tick can wait on a hung NVML call or a slow controller,
and a node whose agent is merely busy must not go silent. A failed POST is counted and logged
when the error starts or changes; the next interval tries again (a late heartbeat is worthless,
so nothing is queued).

`AgentPoster` is that POST, shared by everything the agent sends the service (heartbeats, GPU
reports, stack results): one place counts failures and logs each once, and its recovery once, so a
service down for an hour is two log lines per sender, not one per interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import httpx

log = logging.getLogger("goodput.agent")
HEARTBEAT_PATH = "/v1/heartbeat"


class HeartbeatTokenError(ValueError):
    """The agent's heartbeat token file is missing, unreadable or empty."""


def read_token(path: Path) -> str:
    try:
        token = path.expanduser().read_text().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise HeartbeatTokenError(f"cannot read agent.heartbeat_token_file {path}: {err}") from None
    if not token:
        raise HeartbeatTokenError(f"agent.heartbeat_token_file {path} is empty")
    return token


class AgentPoster:
    """One authenticated JSON POST to `<url><path>`; failures counted, each distinct one logged once."""

    def __init__(self, url: str, path: str, token: str, *, what: str) -> None:
        self.url = url.rstrip("/") + path
        self._headers = {"Authorization": f"Bearer {token}"}
        self._what = what
        self.sent = self.errors = 0
        self.last_status: int | None = None
        """The HTTP status of the last failure; None after a transport error or a success."""
        self._last_error = ""

    async def post(self, session: httpx.AsyncClient, body: object) -> httpx.Response | None:
        """The 200 response, or None (counted and, when the error is new, logged)."""
        self.last_status = None
        try:
            response = await session.post(self.url, json=body, headers=self._headers)
            if response.status_code != 200:
                self.last_status = response.status_code
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        except Exception as err:  # the service down or refusing: count, say so once, keep going
            self.errors += 1
            text = f"{type(err).__name__}: {err}"
            if text != self._last_error:
                log.warning("%s to %s failed: %s", self._what, self.url, text)
            self._last_error = text
            return None
        if self._last_error:
            log.info("%ss to %s work again", self._what, self.url)
            self._last_error = ""
        self.sent += 1
        return response


class PostCounts:
    """`sent` and `errors` of a sender that posts through its `AgentPoster`."""

    _poster: AgentPoster

    @property
    def sent(self) -> int:
        return self._poster.sent

    @property
    def errors(self) -> int:
        return self._poster.errors


class HeartbeatSender(PostCounts):
    """POSTs `{"cluster", "node", "interval_s"}` to `<url>/v1/heartbeat` with the node's token."""

    def __init__(self, url: str, token: str, *, cluster: str, node: str, interval_s: float,
                 on_response: Callable[[object], None] | None = None) -> None:
        self._poster = AgentPoster(url, HEARTBEAT_PATH, token, what="heartbeat")
        self._body = {"cluster": cluster, "node": node, "interval_s": interval_s}
        self.interval_s = interval_s
        # The response may carry requests for this node (stack captures: activities.adapters.stack_agent).
        self._on_response = on_response

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=max(1.0, self.interval_s), trust_env=False) as session:
            while not stop.is_set():
                await self.beat(session)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)

    async def beat(self, session: httpx.AsyncClient) -> bool:
        response = await self._poster.post(session, self._body)
        if response is None:
            return False
        if self._on_response is not None:
            try:
                self._on_response(response.json())
            except Exception as err:  # a response we cannot read must not stop the heartbeats
                log.warning("heartbeat response from %s not understood: %s", self._poster.url, str(err)[:200])
        return True
