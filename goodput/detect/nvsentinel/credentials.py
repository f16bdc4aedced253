"""Who may send NVSentinel events: bearer tokens, and the OAuth client-credentials tokens goodput mints.

NVSentinel's grpc sink sends a bearer token; its event exporter always fetches one with OAuth 2.0
client credentials. Every comparison of a secret is in constant time, and the OAuth tokens are
stateless (keyed by the client's own secret), so goodput keeps no token store.
"""

from __future__ import annotations

import base64
import hmac
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

MIN_TOKEN_CHARS = 16


def token_accepted(header_value: str | None, tokens: Sequence[str]) -> bool:
    """An `Authorization: Bearer <token>` value against every accepted token, in constant time per token.
    With no tokens configured every request is accepted (the settings allow that only deliberately)."""
    if not tokens:
        return True
    if not header_value:
        return False
    scheme, _, token = header_value.strip().partition(" ")
    given = token.strip().encode("utf-8", "replace")
    found = False
    for accepted in tokens:
        found |= hmac.compare_digest(given, accepted.encode("utf-8", "replace"))
    return found and scheme.lower() == "bearer" and bool(given)


_CLIENT_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_OAUTH_CONTEXT = b"goodput nvsentinel oauth access token v1"


def _client_key(secret: str) -> bytes:
    return hmac.digest(secret.encode("utf-8", "replace"), _OAUTH_CONTEXT, "sha256")


def mint_access_token(client_id: str, secret: str, now: datetime, ttl_s: int) -> tuple[str, int]:
    """A bearer token for an OAuth client, good for `ttl_s`: `<client>.<expiry>.<mac>`.

    Stateless and keyed by the client's own secret, so a restarted goodput still accepts the token
    an exporter cached, and rotating the secret revokes every token minted with the old one.
    """
    expiry = int(now.timestamp()) + ttl_s
    mac = hmac.digest(_client_key(secret), f"{client_id}.{expiry}".encode(), "sha256").hex()
    return f"{client_id}.{expiry}.{mac}", ttl_s


def access_token_valid(token: str, clients: Mapping[str, str], now: datetime) -> bool:
    """A token `mint_access_token` made for a configured client, not yet expired."""
    client_id, _, rest = token.partition(".")
    expiry_text, _, mac = rest.partition(".")
    secret = clients.get(client_id)
    if (secret is None or not (expiry_text.isascii() and expiry_text.isdigit()) or len(expiry_text) > 12
            or len(mac) != 64):
        return False
    expected = hmac.digest(_client_key(secret), f"{client_id}.{expiry_text}".encode(), "sha256").hex()
    # Bytes, not str: compare_digest raises on a non-ASCII str, and the token is the caller's text.
    return (hmac.compare_digest(expected.encode(), mac.encode("utf-8", "replace"))
            and int(expiry_text) > now.timestamp())


def client_credentials(form: Mapping[str, str], authorization: str | None,
                       clients: Mapping[str, str]) -> str | None:
    """The client id of a valid client-credentials request (HTTP Basic or form fields, RFC 6749
    2.3.1), or None. Every configured secret is compared in constant time."""
    client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return None
            raw_id, _, raw_secret = decoded.partition(":")
            client_id, secret = urllib.parse.unquote_plus(raw_id), urllib.parse.unquote_plus(raw_secret)
    found = None
    for known, expected in clients.items():
        if hmac.compare_digest(known.encode(), client_id.encode("utf-8", "replace")) & hmac.compare_digest(
                expected.encode("utf-8", "replace"), secret.encode("utf-8", "replace")):
            found = known
    return found if secret else None


def read_token_file(path: Path) -> str:
    """The token in a file (surrounding whitespace ignored), checked like a configured one."""
    token = path.expanduser().read_text(encoding="utf-8").strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"the token in {path} is shorter than {MIN_TOKEN_CHARS} characters")
    return token
