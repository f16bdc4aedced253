"""The console's front door: who is asking, may they, did the form come from our own page, and
what the browser may load.

Every route asks `require(request, role)`; state-changing routes also `check_csrf`. Failures are
typed (`NotAuthenticated`, `Forbidden`) and rendered by the app as clear 401 and 403 pages (or
plain text for scripts). Headers forbid framing, inline script and sniffing, so even a job-
controlled string that slipped past escaping could not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from starlette.datastructures import FormData
from starlette.requests import Request

from goodput.console.auth import Principal, Role, TokenAuthenticator, bearer_token

SESSION_COOKIE = "goodput_session"
CSRF_FIELD = "csrf_token"
MAX_FORM_BYTES = 16 * 1024

SECURITY_HEADERS = {
    "content-security-policy": ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class NotAuthenticated(Exception):
    """No valid credentials: 401 (and the login page for a browser)."""


class Forbidden(Exception):
    """Valid credentials, not enough role, or a form without its CSRF token: 403."""


@dataclass(frozen=True)
class Caller:
    principal: Principal
    origin: str  # where the request came from, for the audit trail ("console 127.0.0.1")


def caller(request: Request, auth: TokenAuthenticator) -> Caller | None:
    token = bearer_token(request.headers)
    principal = None
    if token is not None:
        principal = auth.from_bearer(token)
    elif SESSION_COOKIE in request.cookies:
        principal = auth.from_session(request.cookies[SESSION_COOKIE], datetime.now(UTC))
    if principal is None:
        return None
    # The socket's peer, never a forwarded-for header: a client cannot choose what is recorded.
    host = request.client.host if request.client else "unknown"
    return Caller(principal=principal, origin=f"console {host}")


def require(request: Request, auth: TokenAuthenticator, role: Role = Role.VIEWER) -> Caller:
    who = caller(request, auth)
    if who is None:
        raise NotAuthenticated("log in to use the console")
    if not who.principal.can(role):
        raise Forbidden(f"{who.principal.name} is a {who.principal.role.name.lower()}; "
                        f"this needs the {role.name.lower()} role")
    return who


async def checked_form(request: Request, auth: TokenAuthenticator, who: Caller) -> FormData:
    """The posted form, bounded in size, after its CSRF token matched the caller's session."""
    declared = request.headers.get("content-length", "")
    if not declared.isdigit() or int(declared) > MAX_FORM_BYTES:
        raise Forbidden("form too large or without a length")
    form = await request.form(max_files=0, max_fields=20)
    token = form.get(CSRF_FIELD)
    if who.principal.via_session and (not isinstance(token, str) or not auth.csrf_ok(who.principal, token)):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page and try again")
    return form


def same_origin_post(request: Request) -> bool:
    """A second line behind CSRF tokens: a browser's cross-site POST names its own origin."""
    origin = request.headers.get("origin")
    if origin is None or (origin == "null" and request.headers.get("authorization")):
        return True
    return origin == f"{request.url.scheme}://{request.url.netloc}"
