"""The node agent's heartbeat: one small authenticated POST to the service every interval.

Its own loop, beside the agent's tick: a tick can wait on a hung NVML call or a slow controller,
and a node whose agent is merely busy must not go silent. A failed POST is counted and logged
when the error starts or changes; the next interval tries again (a late heartbeat is worthless,
so nothing is queued).
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


class HeartbeatSender:
    """POSTs `{"cluster", "node", "interval_s"}` to `<url>/v1/heartbeat` with the node's token."""

    def __init__(self, url: str, token: str, *, cluster: str, node: str, interval_s: float,
                 on_response: Callable[[object], None] | None = None) -> None:
        self._url = url.rstrip("/") + HEARTBEAT_PATH
        self._headers = {"Authorization": f"Bearer {token}"}
        self._body = {"cluster": cluster, "node": node, "interval_s": interval_s}
        self.interval_s = interval_s
        self.sent = 0
        self.errors = 0
        self._last_error = ""
        # The response may carry requests for this node (stack captures: activities.adapters.stack_agent).
        self._on_response = on_response

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=max(1.0, self.interval_s), trust_env=False) as session:
            while not stop.is_set():
                await self.beat(session)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)

    async def beat(self, session: httpx.AsyncClient) -> bool:
        try:
            response = await session.post(self._url, json=self._body, headers=self._headers)
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        except Exception as err:  # the service down or refusing: count, say so once, keep beating
            self.errors += 1
            text = f"{type(err).__name__}: {err}"
            if text != self._last_error:
                log.warning("heartbeat to %s failed: %s", self._url, text)
            self._last_error = text
            return False
        if self._last_error:
            log.info("heartbeats to %s work again", self._url)
            self._last_error = ""
        self.sent += 1
        if self._on_response is not None:
            try:
                self._on_response(response.json())
            except Exception as err:  # a response we cannot read must not stop the heartbeats
                log.warning("heartbeat response from %s not understood: %s", self._url, str(err)[:200])
        return True
