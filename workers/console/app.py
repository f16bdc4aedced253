"""The Recovery Console: a Starlette app, server-rendered, live over server-sent events.

Routes read through `ConsoleBackend` (visibility queries, never a scan of histories) and act
through the same `TemporalIncidentService` the CLI uses, so an approval from the console is the
same workflow update, with the same validation, as `goodput approve`. Every state change needs
the operator role, a same-origin POST and the session's CSRF token, and names its caller and
origin in the decision the workflow audits.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from functools import partial

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from goodput.console.auth import SESSION_TTL, ConsoleUser, Role
from goodput.console.filters import PAGE_SIZES, FilterError, IncidentFilter
from goodput.console.views import approval_deadline, earlier_failures, planned_effects, step_durations
from goodput.identifiers import InvalidIdentifierError
from goodput.models import Category, Mode, OperatorDecision
from goodput.recover.incident import Decision, DecisionVerb
from goodput.recover.lifecycle import IncidentState, is_terminal
from goodput.service.incidents import DecisionRejectedError, IncidentSummary, ServiceError, UnknownIncidentError
from workers.console import advice, pages
from workers.console.context import HERE, ConsoleContext
from workers.console.security import (
    SECURITY_HEADERS,
    SESSION_COOKIE,
    Caller,
    Forbidden,
    NotAuthenticated,
    caller,
    checked_form,
    require,
    same_origin_post,
)
from workers.console.streams import HeldStream
from workers.metrics_endpoint import metrics_endpoint

MAX_REASON = 2000
LOGIN_LINK_PATH = "/login/once"
# The link's token is in its URL: neither the redirect nor the page after it may send it on.
NO_REFERRER = {**SECURITY_HEADERS, "referrer-policy": "no-referrer"}


def build_app(ctx: ConsoleContext) -> Starlette:
    async def on_unauthenticated(request: Request, exc: Exception) -> Response:
        if _wants_html(request):
            return ctx.render(request, "login.html", None, status=401, message=str(exc),
                              next_url=request.url.path)
        return PlainTextResponse(f"401 {exc}\n", status_code=401, headers={"www-authenticate": "Bearer"})

    async def on_forbidden(request: Request, exc: Exception) -> Response:
        if _wants_html(request):
            return ctx.render(request, "error.html", caller(request, ctx.auth), status=403,
                              title="403 Forbidden", message=str(exc))
        return PlainTextResponse(f"403 {exc}\n", status_code=403)

    async def on_service_error(request: Request, exc: Exception) -> Response:
        status = 404 if isinstance(exc, UnknownIncidentError) else 409 if isinstance(
            exc, DecisionRejectedError) else 503 if isinstance(exc, ServiceError) else 400
        return ctx.render(request, "error.html", caller(request, ctx.auth), status=status,
                          title=f"{status}", message=str(exc))

    async def on_http(request: Request, exc: Exception) -> Response:
        code = exc.status_code if isinstance(exc, HTTPException) else 500
        return ctx.render(request, "error.html", caller(request, ctx.auth), status=code, title=str(code),
                          message=exc.detail if isinstance(exc, HTTPException) else "error")

    routes = [
        Route("/", lambda request: RedirectResponse("/incidents", status_code=303)),
        Route("/login", partial(login_form, ctx), methods=["GET"]),
        Route("/login", partial(login, ctx), methods=["POST"]),
        Route(LOGIN_LINK_PATH, partial(login_link, ctx), methods=["GET"]),
        Route("/logout", partial(logout, ctx), methods=["POST"]),
        Route("/incidents", partial(incidents, ctx)),
        Route("/incidents/stream", partial(stream, ctx)),
        Route("/incidents/{incident_id}", partial(incident, ctx)),
        Route("/incidents/{incident_id}/{verb:str}", partial(confirm, ctx), methods=["GET"]),
        Route("/incidents/{incident_id}/{verb:str}", partial(decide, ctx), methods=["POST"]),
        Route("/inbox", partial(inbox, ctx)),
        *pages.routes(ctx),
        *advice.routes(ctx),
        Route("/metrics", metrics_endpoint),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={
        NotAuthenticated: on_unauthenticated, Forbidden: on_forbidden, ServiceError: on_service_error,
        FilterError: on_service_error, InvalidIdentifierError: on_service_error, HTTPException: on_http})


def _wants_html(request: Request) -> bool:
    return "authorization" not in request.headers and "text/event-stream" not in request.headers.get("accept", "")


async def login_form(ctx: ConsoleContext, request: Request) -> Response:
    return ctx.render(request, "login.html", caller(request, ctx.auth), message="",
                      next_url=request.query_params.get("next", "/incidents"))


async def login(ctx: ConsoleContext, request: Request) -> Response:
    if not same_origin_post(request):
        raise Forbidden("cross-origin login refused")
    form = await request.form(max_files=0, max_fields=5)
    token = form.get("token")
    user = ctx.auth.user_for_token(token) if isinstance(token, str) else None
    if user is None:
        return ctx.render(request, "login.html", None, status=401, message="that token is not valid",
                          next_url="/incidents")
    target = form.get("next")
    # Only a local path: a login link must not bounce the operator to another site.
    safe = target if isinstance(target, str) and target.startswith("/") and not target.startswith("//") else "/"
    response = RedirectResponse(safe, status_code=303)
    _set_session(ctx, request, response, user)
    return response


async def login_link(ctx: ConsoleContext, request: Request) -> Response:
    """A one-time link: its token is exchanged for the session cookie, then the browser is sent to
    a URL without it. Refusals say only that the link is not valid (used, expired or forged)."""
    token = request.query_params.get("token", "")
    user = ctx.login_links.redeem(token, datetime.now(UTC))
    if user is None:
        page = ctx.render(request, "login.html", None, status=401, next_url="/incidents",
                          message="that login link is not valid (each works once, for 10 minutes): "
                                  "log in with the token instead")
        page.headers.update(NO_REFERRER)
        return page
    response = RedirectResponse("/incidents", status_code=303, headers=NO_REFERRER)
    _set_session(ctx, request, response, user)
    return response


def _set_session(ctx: ConsoleContext, request: Request, response: Response, user: ConsoleUser) -> None:
    response.set_cookie(SESSION_COOKIE, ctx.auth.new_session(user, datetime.now(UTC)), httponly=True,
                        samesite="strict", max_age=int(SESSION_TTL.total_seconds()),
                        secure=request.url.scheme == "https")


async def logout(ctx: ConsoleContext, request: Request) -> Response:
    who = require(request, ctx.auth)
    await checked_form(request, ctx.auth, who)
    ctx.auth.revoke(who.principal, datetime.now(UTC))  # ends its live streams too
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    return response


def _page_token(raw: str | None) -> bytes | None:
    if not raw:
        return None
    try:
        return base64.urlsafe_b64decode(raw.encode("ascii") + b"==")
    except (ValueError, binascii.Error) as err:
        raise FilterError("bad page token") from err


async def _listing(ctx: ConsoleContext, request: Request) -> dict[str, object]:
    flt = IncidentFilter.from_params(request.query_params)
    token = request.query_params.get("page")

    async def fetch() -> dict[str, object]:
        page = await ctx.backend.page(flt, _page_token(token))
        # Counts cost a query per state (the server groups only by execution status) and change
        # only as incidents move: refreshed on their own, slower period (docs/benchmarks.md).
        unstated = flt.model_copy(update={"state": None})
        counts = await ctx.counts.get(unstated.as_params(), lambda: ctx.backend.counts(unstated))
        nxt = base64.urlsafe_b64encode(page.next_token).decode().rstrip("=") if page.next_token else ""
        return {"flt": flt, "rows": page.rows, "counts": counts, "badges": earlier_failures(page.rows),
                "next_page": nxt, "total": sum(counts.values())}

    # Views are keyed by their canonical form: the same filters in another order share a fetch.
    return await ctx.listings.get(f"{flt.as_params()}#{token or ''}", fetch)


async def incidents(ctx: ConsoleContext, request: Request) -> Response:
    who = require(request, ctx.auth)
    values = await _listing(ctx, request)
    return ctx.render(request, "incidents.html", who, 200, states=list(IncidentState), modes=list(Mode),
                      categories=list(Category), page_sizes=PAGE_SIZES, **values)


async def stream(ctx: ConsoleContext, request: Request) -> Response:
    """Server-sent events: the list's rows and counts whenever they change (no reload).

    A stream outlives the request that proved who asked: the caller is checked again before
    every read, so a logout, an expired session or a lost role ends it (`event: ended`). Each
    user holds at most `max_streams_per_user` at once; more are refused, not queued."""
    who = require(request, ctx.auth)
    IncidentFilter.from_params(request.query_params)  # a bad filter fails here, not mid-stream
    name = who.principal.name
    if not ctx.streams.hold(name):
        return PlainTextResponse(f"429 {name} already has {ctx.max_streams_per_user} live streams open; "
                                 "close another console tab\n", status_code=429, headers=SECURITY_HEADERS)

    async def events() -> AsyncIterator[str]:
        last = ""
        idle = 0.0
        while not await request.is_disconnected():
            now = caller(request, ctx.auth)
            if now is None or now.principal.name != name or not now.principal.can(Role.VIEWER):
                yield f"event: ended\ndata: {json.dumps({'error': 'session ended: log in again'})}\n\n"
                return
            try:
                values = await _listing(ctx, request)
                body = json.dumps({
                    "rows": ctx.env.get_template("_incident_rows.html").render(**values),
                    "counts": ctx.env.get_template("_counts.html").render(**values)})
            except ServiceError as err:
                body = json.dumps({"error": str(err)})
            digest = hashlib.sha256(body.encode()).hexdigest()
            if digest != last:
                last, idle = digest, 0.0
                yield f"event: incidents\ndata: {body}\n\n"
            elif idle >= 15:
                idle = 0.0
                yield ": keep-alive\n\n"
            if await _closing(ctx, ctx.refresh_s):
                # The browser reconnects on its own once a console answers again.
                yield "event: closing\ndata: {}\n\n"
                return
            idle += ctx.refresh_s

    return HeldStream(events(), release=partial(ctx.streams.release, name), media_type="text/event-stream",
                      headers={**SECURITY_HEADERS, "x-accel-buffering": "no"})


async def _closing(ctx: ConsoleContext, wait_s: float) -> bool:
    """Waits `wait_s`, or less when the console starts stopping; whether it is stopping."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ctx.closing.wait(), timeout=wait_s)
    return ctx.closing.is_set()


async def incident(ctx: ConsoleContext, request: Request) -> Response:
    who = require(request, ctx.auth)
    incident_id = request.path_params["incident_id"]
    report = await ctx.backend.service.get(incident_id)
    try:
        steps = await ctx.backend.steps(incident_id)
    except ServiceError:
        steps = []
    return ctx.render(request, "incident.html", who, r=report, steps=steps, durations=step_durations(report),
                      effects=planned_effects(report.plan, report.key.job_id),
                      deadline=approval_deadline(report, ctx.policy), temporal_link=ctx.temporal_link(incident_id),
                      decidable=not is_terminal(report.state), flash=request.query_params.get("done", ""))


def _verb(request: Request) -> DecisionVerb:
    try:
        return DecisionVerb(request.path_params["verb"])
    except ValueError as err:
        raise HTTPException(404, "no such action: approve or cancel") from err


async def confirm(ctx: ConsoleContext, request: Request) -> Response:
    """The confirmation step: exactly what will be drained, requeued or resubmitted, and a reason."""
    verb = _verb(request)
    who = require(request, ctx.auth, Role.OPERATOR)
    report = await ctx.backend.service.get(request.path_params["incident_id"])
    return ctx.render(request, "confirm.html", who, r=report, verb=verb.value, error="",
                      effects=planned_effects(report.plan, report.key.job_id))


async def decide(ctx: ConsoleContext, request: Request) -> Response:
    verb = _verb(request)
    who = require(request, ctx.auth, Role.OPERATOR)
    if not same_origin_post(request):
        raise Forbidden("cross-origin form refused")
    form = await checked_form(request, ctx.auth, who)
    incident_id = request.path_params["incident_id"]
    reason = form.get("reason")
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason or len(reason) > MAX_REASON:
        report = await ctx.backend.service.get(incident_id)
        return ctx.render(request, "confirm.html", who, status=400, r=report, verb=verb.value,
                          effects=planned_effects(report.plan, report.key.job_id),
                          error=f"a reason is required (at most {MAX_REASON} characters)")
    decision = Decision(verb=verb, by=_operator(who, reason))
    state = await ctx.backend.service.decide(incident_id, decision)
    return RedirectResponse(f"/incidents/{incident_id}?done={verb.value}d+({state})", status_code=303)


def _operator(who: Caller, reason: str) -> OperatorDecision:
    return OperatorDecision(who=who.principal.name, reason=reason, origin=who.origin)


async def inbox(ctx: ConsoleContext, request: Request) -> Response:
    """Incidents waiting for a person, oldest first, each with its deadline."""
    who = require(request, ctx.auth)
    flt = IncidentFilter(state=IncidentState.AWAITING_APPROVAL, cluster=ctx.cluster, open_only=True, page_size=200)
    rows = sorted(await ctx.backend.all(flt, limit=2000), key=lambda s: s.started_at or datetime.min.replace(
        tzinfo=UTC))
    reports = await ctx.backend.reports([row.incident_id for row in rows[:200]])
    waiting: list[tuple[IncidentSummary, datetime | None, list[str]]] = []
    for row in rows[:200]:
        report = reports[row.incident_id]
        if report is None:
            waiting.append((row, None, ["(report unavailable: are its workers up?)"]))
            continue
        waiting.append((row, approval_deadline(report, ctx.policy), planned_effects(report.plan, row.job_id)))
    return ctx.render(request, "inbox.html", who, waiting=waiting, now=datetime.now(UTC), more=len(rows) > 200)
