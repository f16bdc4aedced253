"""The console's overview pages: kill switch, nodes, trust, jobs, why-didn't-it-recover, audit, goodput.

Each reads a bounded window (the newest incidents by visibility query, the audit log) and hands
it to the pure views in goodput.console; the kill switch is the one that acts, with the same
checks as an approval.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import partial

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from activities.adapters.audit import JsonlAuditLog
from goodput.console.auth import Role
from goodput.console.filters import IncidentFilter
from goodput.console.views import gpu_hours_saved, job_rows, node_grid, partition_modes, recovery_ladder
from goodput.identifiers import validate_cluster, validate_job_id
from goodput.models import OperatorDecision
from goodput.ownership import owning_incident
from goodput.recover.audit import parse_since, since, to_csv
from goodput.recover.incident import IncidentReport
from goodput.recover.node_incident import node_incident_id
from goodput.recover.shared_fault import owning_fault
from goodput.service.faults import DEFAULT_WINDOW, all_faults
from goodput.service.incidents import IncidentSummary, ServiceError
from workers.console.context import ConsoleContext
from workers.console.security import SECURITY_HEADERS, Forbidden, checked_form, require, same_origin_post

WINDOW = 2000  # incidents the overview pages look at, newest first
REPORT_WINDOW = 200  # incidents whose full reports the goodput page reads


def routes(ctx: ConsoleContext) -> list[Route]:
    return [
        Route("/kill-switch", partial(kill_switch, ctx), methods=["GET"]),
        Route("/kill-switch", partial(flip_kill_switch, ctx), methods=["POST"]),
        Route("/nodes", partial(nodes, ctx)),
        Route("/faults", partial(faults, ctx)),
        Route("/trust", partial(trust, ctx)),
        Route("/jobs", partial(jobs, ctx)),
        Route("/jobs/{cluster}/{job_id}/why", partial(why, ctx)),
        Route("/why", partial(why_form, ctx)),
        Route("/audit", partial(audit, ctx)),
        Route("/goodput", partial(goodput, ctx)),
    ]


async def kill_switch(ctx: ConsoleContext, request: Request) -> Response:
    who = require(request, ctx.auth)
    state = await ctx.backend.service.kill_switch(ctx.cluster)
    return ctx.render(request, "kill_switch.html", who, switch=state, modes=partition_modes(ctx.policy, state),
                      error="")


async def flip_kill_switch(ctx: ConsoleContext, request: Request) -> Response:
    who = require(request, ctx.auth, Role.OPERATOR)
    if not same_origin_post(request):
        raise Forbidden("cross-origin form refused")
    form = await checked_form(request, ctx.auth, who)
    action, reason = form.get("action"), form.get("reason")
    reason = reason.strip() if isinstance(reason, str) else ""
    if action not in ("on", "off") or not reason or len(reason) > 2000:
        state = await ctx.backend.service.kill_switch(ctx.cluster)
        return ctx.render(request, "kill_switch.html", who, status=400, switch=state,
                          modes=partition_modes(ctx.policy, state), error="say why (a reason is required)")
    by = OperatorDecision(who=who.principal.name, reason=reason, origin=who.origin)
    await ctx.backend.service.kill_switch(ctx.cluster, action == "on", by)
    return RedirectResponse("/kill-switch", status_code=303)


async def _newest(ctx: ConsoleContext) -> list[IncidentSummary]:
    """The overview pages' window: 2,000 rows take seconds at scale (docs/benchmarks.md, "Console
    at scale"), so every page and browser shares one read per overview period."""
    return await ctx.overviews.get(ctx.cluster, lambda: ctx.backend.all(
        IncidentFilter(cluster=ctx.cluster, page_size=200), limit=WINDOW))


async def nodes(ctx: ConsoleContext, request: Request) -> Response:
    who = require(request, ctx.auth)
    rows = await _newest(ctx)
    now = datetime.now(UTC)
    standing = await ctx.backend.service.node_standing(ctx.cluster)
    health = await ctx.backend.service.node_health(ctx.cluster)
    drained: list[tuple[str, str, str, str]] = []
    if ctx.scheduler is not None:
        try:
            for node in await ctx.scheduler.list_nodes():
                if node.drained:
                    incident = owning_incident(node.reason)
                    # a shared drain names its fault; the node's own node incident names the incident
                    owner = (f"goodput (fault {incident}, node incident {node_incident_id(ctx.cluster, node.name)})"
                             if owning_fault(node.reason) else f"goodput (incident {incident})")
                    drained.append((node.name, owner if incident else
                                    f"{node.reason_user or 'someone else'}", node.reason, node.state))
        except Exception as err:
            drained.append(("?", f"scheduler unavailable: {str(err)[:200]}", "", ""))
    days = [(now - timedelta(days=13 - i)).strftime("%m-%d") for i in range(14)]
    return ctx.render(request, "nodes.html", who, grid=node_grid(rows, now), days=days, standing=standing,
                      health=health, drained=sorted(drained), scheduler=ctx.scheduler is not None)


async def faults(ctx: ConsoleContext, request: Request) -> Response:
    """One fault, many jobs: each node incident with every job it hit; incidents never linked to
    one grouped by the node they blame, close together in time."""
    who = require(request, ctx.auth)
    rows = await _newest(ctx)
    linked = await ctx.backend.service.node_incidents(ctx.cluster)
    return ctx.render(request, "faults.html", who, faults=all_faults(linked, rows), window=WINDOW,
                      window_min=int(DEFAULT_WINDOW.total_seconds() // 60))


async def trust(ctx: ConsoleContext, request: Request) -> Response:
    """Each rule's track record and the autonomy it earned (goodput.recover.trust)."""
    who = require(request, ctx.auth)
    rules = await ctx.backend.service.trust(ctx.cluster)
    return ctx.render(request, "trust.html", who, rules=rules, bar=ctx.policy.autonomy)


async def jobs(ctx: ConsoleContext, request: Request) -> Response:
    who = require(request, ctx.auth)
    rows = await _newest(ctx)
    return ctx.render(request, "jobs.html", who, jobs=job_rows(rows), budget=ctx.policy.max_resume_attempts,
                      window=WINDOW)


async def why_form(ctx: ConsoleContext, request: Request) -> Response:
    require(request, ctx.auth)
    job_id = validate_job_id(request.query_params.get("job", "").strip())
    return RedirectResponse(f"/jobs/{ctx.cluster}/{job_id}/why", status_code=303)


async def why(ctx: ConsoleContext, request: Request) -> Response:
    """Why didn't job X recover? The newest incident of the job, rung by rung."""
    who = require(request, ctx.auth)
    cluster = validate_cluster(request.path_params["cluster"])
    job_id = validate_job_id(request.path_params["job_id"])
    rows = await ctx.backend.all(IncidentFilter(cluster=cluster, job=job_id), limit=50)
    report: IncidentReport | None = None
    if rows:
        newest = max(rows, key=lambda s: (s.started_at or datetime.min.replace(tzinfo=UTC), s.incident_id))
        report = await ctx.backend.service.get(newest.incident_id)
    ladder = recovery_ladder(job_id, report is not None, report)
    first_failed = next((r for r in ladder if r.passed is False), None)
    return ctx.render(request, "why.html", who, job_id=job_id, job_cluster=cluster, ladder=ladder,
                      first_failed=first_failed, report=report, incidents=rows)


async def audit(ctx: ConsoleContext, request: Request) -> Response:
    who = require(request, ctx.auth)
    log = JsonlAuditLog(ctx.audit_path)
    start_text = request.query_params.get("since", "")
    try:
        start = parse_since(start_text, datetime.now(UTC)) if start_text else None
    except ValueError as err:
        raise ServiceError(str(err)) from err
    records = since(log.read(), start)
    if request.query_params.get("format") == "csv":
        return Response(to_csv(records), media_type="text/csv", headers={
            **SECURITY_HEADERS, "content-disposition": 'attachment; filename="goodput-audit.csv"'})
    return ctx.render(request, "audit.html", who, records=list(reversed(records[-1000:])), since=start_text,
                      skipped=log.skipped_lines, total=len(records))


def _distribution(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {"n": float(len(ordered)), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": ordered[-1]}


async def goodput(ctx: ConsoleContext, request: Request) -> Response:
    """Detection and action latency, incidents by category per day, GPU-hours lost, modes."""
    who = require(request, ctx.auth)
    rows = await _newest(ctx)
    by_day: dict[str, Counter[str]] = defaultdict(Counter)
    for s in rows:
        if s.started_at is not None:
            by_day[s.started_at.strftime("%Y-%m-%d")][s.category or "unattributed"] += 1
    detection: list[float] = []
    action: list[float] = []
    lost_gpu_hours = saved_gpu_hours = 0.0
    recovered = 0
    reports = await ctx.backend.reports([s.incident_id for s in rows[:REPORT_WINDOW]])
    for report in reports.values():
        if report is None:
            continue
        detection += [(a.detected_at - a.observed_at).total_seconds() for a in report.anomalies]
        acted = [r.at for r in report.audit if r.actor == "goodput" and r.action.value in ("drain", "requeue",
                                                                                         "resubmit", "stop")]
        if acted and report.anomalies:
            action.append((min(acted) - min(a.detected_at for a in report.anomalies)).total_seconds())
        if report.lost_work is not None:
            lost_gpu_hours += report.lost_work.gpu_hours
        recovered += report.state.value == "recovered"
        saved_gpu_hours += gpu_hours_saved(report, ctx.policy, ctx.manual_recovery_s) or 0.0
    switch = await ctx.backend.service.kill_switch(ctx.cluster)
    categories = sorted({c for day in by_day.values() for c in day})
    return ctx.render(request, "goodput.html", who, detection=_distribution(detection),
                      action=_distribution(action), days=sorted(by_day.items())[-30:], categories=categories,
                      lost_gpu_hours=lost_gpu_hours, recovered=recovered,
                      saved_gpu_hours=saved_gpu_hours, manual_recovery_min=ctx.manual_recovery_s / 60, window=len(rows),
                      report_window=min(len(rows), REPORT_WINDOW), modes=partition_modes(ctx.policy, switch))
