"""`GET /metrics`: the process's metrics for Prometheus to scrape, as a Starlette endpoint.

Mounted by the console (`Route("/metrics", metrics_endpoint)`). It serves what the process that
runs it records: in `goodput up` and `goodput worker` that is the recovery activities and the
watchers; detection agents on other hosts export over OTLP instead (docs/operations.md, Metrics).
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from workers.prometheus import CONTENT_TYPE, ExpositionUnavailableError, published


async def metrics_endpoint(request: Request) -> Response:
    exposition = published()
    if exposition is None:
        return PlainTextResponse("metrics are not set up in this process (workers.telemetry.setup_metrics)\n",
                                 status_code=503)
    # Collecting aggregates every instrument: off the event loop, which serves the console.
    try:
        body = await asyncio.to_thread(exposition.render)
    except ExpositionUnavailableError as err:
        # Never 200 with nothing: Prometheus marks the target down and says why, alerts do not flap.
        return PlainTextResponse(f"{err}\n", status_code=503)
    return Response(body, headers={"Content-Type": CONTENT_TYPE})
