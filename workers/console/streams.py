"""How many live streams each console user holds, and a streaming response that gives its place
back however it ends.

Every open incident list holds a server-sent-events stream that re-reads its view every
`refresh_s`: one user (or one leaked token in a loop) opening thousands would hold as many
connections and tasks. A user gets `max_streams_per_user` places; a stream takes one when its
request is accepted and returns it when the response ends, whether it finished, the client went
away or the server cancelled it (the response, not the generator, releases: a generator that was
never started never runs its `finally`).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class StreamSlots:
    def __init__(self, per_user: int) -> None:
        self.per_user = per_user
        self._held: MutableMapping[str, int] = {}

    def hold(self, user: str) -> bool:
        """Takes a place for `user`; False when they hold all theirs."""
        held = self._held.get(user, 0)
        if held >= self.per_user:
            return False
        self._held[user] = held + 1
        return True

    def release(self, user: str) -> None:
        held = self._held.get(user, 0) - 1
        if held > 0:
            self._held[user] = held
        else:
            self._held.pop(user, None)

    def held(self, user: str) -> int:
        return self._held.get(user, 0)


class HeldStream(StreamingResponse):
    """A StreamingResponse that calls `release` exactly once when it is done being sent."""

    def __init__(self, content: Any, *, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release: Callable[[], None] | None = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()
