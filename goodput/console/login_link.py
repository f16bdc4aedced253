"""One-time login links: what `goodput up` prints so a newcomer logs in with one click.

A link carries a random token that is exchanged, once, for the ordinary session cookie. It is
short-lived (10 minutes) and single use, so a link left in a terminal's scrollback, a shell
history or a shared screen is worthless once used or old. Only its SHA-256 is kept, in memory
(a process's memory dump or a debug print reveals no usable link), and a presented token is
compared with every live one in constant time. Pure (hashlib, hmac and secrets only).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from goodput.console.auth import ConsoleUser

LINK_TTL = timedelta(minutes=10)
# Links outstanding at once (one per start of the console in practice); beyond this many the
# oldest is forgotten first, so a caller issuing in a loop cannot grow memory.
MAX_LINKS = 16
MAX_TOKEN = 128  # longer than any token issued here: refused before hashing


@dataclass(frozen=True)
class _Link:
    digest: bytes
    expires: float
    user: ConsoleUser


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class LoginLinks:
    def __init__(self, ttl: timedelta = LINK_TTL) -> None:
        self._ttl = ttl
        self._links: list[_Link] = []

    def issue(self, user: ConsoleUser, now: datetime) -> str:
        """A new token that logs `user` in once before `now + ttl`; only its hash is kept."""
        self._links = [link for link in self._links if link.expires >= now.timestamp()]
        del self._links[:max(0, len(self._links) - MAX_LINKS + 1)]
        token = secrets.token_urlsafe(32)
        self._links.append(_Link(_digest(token), (now + self._ttl).timestamp(), user))
        return token

    def redeem(self, token: str, now: datetime) -> ConsoleUser | None:
        """The user a live link's token names, spending the link; None for any other token
        (forged, already used, expired: an expired one is spent too)."""
        if not token or len(token) > MAX_TOKEN:
            return None
        presented = _digest(token)
        found = None
        for link in self._links:  # compare with every live link, in constant time each
            if hmac.compare_digest(presented, link.digest):
                found = link
        if found is None:
            return None
        self._links.remove(found)
        return found.user if found.expires >= now.timestamp() else None

    def outstanding(self) -> int:
        return len(self._links)
