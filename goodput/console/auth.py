"""Who may see and do what in the Recovery Console: roles, tokens, signed sessions, CSRF tokens.

The console can drain nodes and restart jobs (by approving a recovery) and can stop every
autonomous action (the kill switch), so every request is authenticated and every state change is
checked against a role: viewers read, operators approve, cancel and flip the kill switch, admins
do both plus whatever later needs it. Browsers log in once with a token and then carry a signed,
HttpOnly, SameSite=Strict session cookie; scripts send the token as `Authorization: Bearer`. A
form is accepted only with the CSRF token derived from its session, so a page on another origin
cannot make an operator's browser act. `Authenticator` is the seam an OIDC login plugs into:
anything that turns a request's credentials into a `Principal`. Pure (hmac and secrets only).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Protocol

from pydantic import Field, SecretStr

from goodput.models import Frozen

SESSION_TTL = timedelta(hours=12)
MAX_COOKIE = 1024
# Sessions logged out and not yet expired, remembered per process; beyond this many the oldest
# is forgotten first (it expires within SESSION_TTL anyway).
MAX_REVOKED = 100_000


class Role(IntEnum):
    """Ordered: a higher role can do everything a lower one can."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @classmethod
    def parse(cls, name: str) -> Role:
        """The role named `name` (any case); ValueError for any other name."""
        try:
            return cls[name.strip().upper()]
        except KeyError as err:
            raise ValueError(f"unknown role {name!r}: viewer, operator or admin") from err


class ConsoleUser(Frozen):
    """One configured identity: a name for the audit trail, a role, and the token that proves it."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    role: str = Field(pattern=r"^(viewer|operator|admin)$")
    token: SecretStr = Field(min_length=16, max_length=256)


class Principal(Frozen):
    """Who a request is: a configured user's name and role, and how the request proved it."""

    name: str
    role: Role
    # How the request proved who it is: a session cookie needs a CSRF token on every form; a
    # bearer token is no ambient credential (a browser never adds it on its own) and needs none.
    via_session: bool = False
    session_id: str = ""

    def can(self, needed: Role) -> bool:
        """Whether this principal's role is `needed` or higher."""
        return self.role >= needed


class Authenticator(Protocol):
    """Turns a request's credentials into a principal, or None (the OIDC seam)."""

    def from_bearer(self, token: str) -> Principal | None:
        """The principal a bearer token proves, or None."""
        ...

    def from_session(self, cookie: str, now: datetime) -> Principal | None:
        """The principal a session cookie proves at `now` (signed, unexpired, not revoked), or None."""
        ...


class TokenAuthenticator:
    """Configured users with static tokens; sessions signed with a per-deployment secret."""

    def __init__(self, users: tuple[ConsoleUser, ...], secret: bytes) -> None:
        if len(secret) < 32:
            raise ValueError("the session secret must be at least 32 bytes")
        self._users = users
        self._secret = secret
        self._revoked: dict[str, float] = {}  # session id -> when its cookie would expire

    def user_for_token(self, token: str) -> ConsoleUser | None:
        """The configured user whose token this is (compared with every token in constant time), or None."""
        presented = token.encode("utf-8", "surrogateescape")
        found = None
        for user in self._users:  # compare with every token, in constant time each
            if hmac.compare_digest(presented, user.token.get_secret_value().encode()):
                found = user
        return found

    def user_named(self, name: str) -> ConsoleUser | None:
        """The configured user called `name`, or None."""
        return next((u for u in self._users if u.name == name), None)

    def from_bearer(self, token: str) -> Principal | None:
        """The principal of the user whose token this is, or None."""
        user = self.user_for_token(token)
        return None if user is None else Principal(name=user.name, role=Role.parse(user.role))

    def new_session(self, user: ConsoleUser, now: datetime) -> str:
        """A cookie value: user, expiry and a random session id, signed. The role is looked up at
        every request, so taking a user's role away takes effect without waiting for expiry."""
        expires = int((now + SESSION_TTL).timestamp())
        body = f"{user.name}|{expires}|{secrets.token_hex(16)}"
        return f"{_b64(body.encode())}.{self._sign(body)}"

    def from_session(self, cookie: str, now: datetime) -> Principal | None:
        """The principal of a signed, unexpired, unrevoked session cookie whose user still exists, or None."""
        if len(cookie) > MAX_COOKIE or "." not in cookie:
            return None
        encoded, _, signature = cookie.rpartition(".")
        try:
            body = base64.urlsafe_b64decode(encoded.encode("ascii") + b"==").decode("utf-8")
        except (ValueError, UnicodeError):
            return None
        if not _same(signature, self._sign(body)):
            return None
        name, expires, session_id = [*body.split("|"), "", "", ""][:3]
        if not (expires.isascii() and expires.isdigit()) or int(expires) < now.timestamp():
            return None
        if session_id in self._revoked:
            return None
        user = next((u for u in self._users if u.name == name), None)
        if user is None:
            return None
        return Principal(name=user.name, role=Role.parse(user.role), via_session=True, session_id=session_id)

    def revoke(self, principal: Principal, now: datetime) -> None:
        """Logout: the session's cookie stops working at once, here, not only in the browser that
        dropped it (a copied cookie, an open live stream). Held in memory until the cookie would
        have expired anyway; another console process of the deployment does not learn of it."""
        if not principal.via_session or not principal.session_id:
            return
        expired = [sid for sid, until in self._revoked.items() if until < now.timestamp()]
        for sid in expired:
            del self._revoked[sid]
        while len(self._revoked) >= MAX_REVOKED:
            del self._revoked[next(iter(self._revoked))]
        self._revoked[principal.session_id] = (now + SESSION_TTL).timestamp()

    def csrf_token(self, principal: Principal) -> str:
        """Bound to the session: a token stolen from one session is worthless in another."""
        return self._sign(f"csrf|{principal.session_id}")

    def csrf_ok(self, principal: Principal, presented: str) -> bool:
        """Whether a form's CSRF token is this session's; requests with a bearer token need none."""
        if not principal.via_session:
            return True
        return bool(principal.session_id) and _same(presented, self.csrf_token(principal))

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self._secret, body.encode("utf-8"), hashlib.sha256).digest())


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer` header, or None."""
    value = headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _same(presented: str, expected: str) -> bool:
    """Constant-time equality that also takes what a client made up: compare_digest refuses
    non-ASCII str (a TypeError, i.e. a 500 for one odd byte), so compare bytes."""
    return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8"))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")
