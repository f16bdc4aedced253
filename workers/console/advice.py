"""The console's Checkpoint interval page: one job's advice, as `goodput advise --job` gives it.

Computed when an operator opens it, never on the incident page itself: it reads the job's
checkpoint tree (through the same finder as the recovery, under a tighter budget) and asks the
scheduler and the job's watcher, which may each be slow or down. So it runs under a time limit,
is shared for a minute per job however many browsers ask, counts node faults over the incidents
the overview pages already hold (no listing of its own), and when it cannot be computed the page
says why instead of failing.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from functools import partial

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from activities.adapters.checkpoints import default_finder
from goodput.checkpoints import ScanLimits
from goodput.checkpoints.job_advice import JobAdvice, Overrides
from goodput.identifiers import validate_cluster, validate_job_id
from goodput.scheduler import JobInfo, SchedulerError
from goodput.service.incidents import ServiceError
from workers.console.context import ConsoleContext
from workers.console.pages import WINDOW, _newest
from workers.console.security import require
from workers.job_advice import gather

log = logging.getLogger("goodput.console")
TIMEOUT_S = 20.0
# Within the page's limit, with room for the scheduler and Temporal; the recovery's own discovery
# keeps the default budget.
LIMITS = ScanLimits(max_seconds=10.0)


def routes(ctx: ConsoleContext) -> list[Route]:
    return [Route("/jobs/{cluster}/{job_id}/advice", partial(job_advice, ctx))]


async def _compute(ctx: ConsoleContext, cluster: str, job_id: str) -> JobAdvice:
    rows = await _newest(ctx)
    mine = [s for s in rows if s.job_id == job_id]
    report = None
    if mine:
        newest = max(mine, key=lambda s: (s.started_at or datetime.min.replace(tzinfo=UTC), s.incident_id))
        report = (await ctx.backend.reports([newest.incident_id]))[newest.incident_id]
    job: JobInfo | None = None
    if ctx.scheduler is not None:
        try:
            job = await ctx.scheduler.get_job(job_id)
        except (SchedulerError, OSError) as err:
            log.info("advice for job %s: the scheduler did not answer (%s); using its incident's record", job_id, err)
    if job is None and report is not None:
        job = report.job
    if job is None:
        raise ServiceError(f"job {job_id}: the scheduler does not know it and no incident of it among the newest "
                           f"{WINDOW} recorded its record")
    reported = [a.step_time_s for a in report.anomalies if a.step_time_s] if report else []
    return await gather(job, cluster, scheduler=ctx.scheduler, finder=default_finder(), client=ctx.backend.client,
                        incidents=rows, limit_reached=len(rows) >= WINDOW, reported_step_times=reported,
                        gpus_per_node=ctx.policy.gpus_per_node, overrides=Overrides(), now=datetime.now(UTC),
                        limits=LIMITS)


async def job_advice(ctx: ConsoleContext, request: Request) -> Response:
    """Viewers may see it: it reads, and shows only numbers and the job's own checkpoint notes."""
    who = require(request, ctx.auth)
    cluster = validate_cluster(request.path_params["cluster"])
    job_id = validate_job_id(request.path_params["job_id"])
    advice: JobAdvice | None = None
    why = ""
    if cluster != ctx.cluster:
        why = f"this console watches cluster {ctx.cluster}: its scheduler and incidents are that cluster's"
    else:
        try:
            advice = await asyncio.wait_for(
                ctx.advice.get(f"{cluster}/{job_id}", lambda: _compute(ctx, cluster, job_id)), TIMEOUT_S)
        except TimeoutError:
            why = (f"not computed within {TIMEOUT_S:g} s (a slow checkpoint tree, scheduler or Temporal); "
                   "it goes on in the background: reload in a minute")
        except ServiceError as err:
            why = str(err)
        except Exception as err:  # the page must stand whatever a source did; the log has the rest
            log.warning("advice for job %s failed", job_id, exc_info=True)
            why = f"could not be computed: {type(err).__name__}"
    return ctx.render(request, "advice.html", who, job_id=job_id, job_cluster=cluster, a=advice, why=why,
                      timeout_s=TIMEOUT_S)
