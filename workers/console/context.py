"""What every console route needs, built once: the Temporal reader, the authenticator, the policy
and cluster it shows, and the template environment (autoescaping everything: incidents carry
job-controlled text — log lines, comments, node names a log claimed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from goodput.checkpoints.job_advice import JobAdvice
from goodput.console.auth import Role, TokenAuthenticator
from goodput.console.login_link import LoginLinks
from goodput.recover.policy import Policy
from goodput.scheduler import Scheduler
from goodput.service.incidents import IncidentSummary
from workers.console.backend import ConsoleBackend
from workers.console.security import CSRF_FIELD, SECURITY_HEADERS, Caller
from workers.console.shared import SharedRefresh
from workers.console.streams import StreamSlots

HERE = Path(__file__).parent


@dataclass
class ConsoleContext:
    backend: ConsoleBackend
    auth: TokenAuthenticator
    policy: Policy
    cluster: str
    audit_path: Path
    temporal_ui_url: str
    namespace: str
    refresh_s: float = 1.0
    counts_refresh_s: float = 10.0
    overview_refresh_s: float = 30.0
    # Read-only here (list_nodes): who drained each node. None where the console runs without it.
    scheduler: Scheduler | None = None
    # The baseline "GPU-hours saved" is measured against: a person recovering the job by hand.
    manual_recovery_s: float = 3600.0
    # Live streams one user may hold at once (each re-reads a page every refresh_s).
    max_streams_per_user: int = 4

    def __post_init__(self) -> None:
        self.streams = StreamSlots(self.max_streams_per_user)
        self.login_links = LoginLinks()
        # Set when the server is stopping: live streams end on it (uvicorn waits for open ones).
        self.closing = asyncio.Event()
        self.listings: SharedRefresh[dict[str, object]] = SharedRefresh(self.refresh_s)
        self.counts: SharedRefresh[dict[str, int]] = SharedRefresh(self.counts_refresh_s)
        self.overviews: SharedRefresh[list[IncidentSummary]] = SharedRefresh(self.overview_refresh_s)
        # A job's checkpoint interval advice reads its checkpoint tree: once a minute per job at most.
        self.advice: SharedRefresh[JobAdvice] = SharedRefresh(60.0)
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(
            enabled_extensions=("html",), default=True), trim_blocks=True, lstrip_blocks=True)

    def temporal_link(self, incident_id: str) -> str:
        return (f"{self.temporal_ui_url.rstrip('/')}/namespaces/{quote(self.namespace, safe='')}"
                f"/workflows/{quote(incident_id, safe='')}")

    def render(self, request: Request, template: str, who: Caller | None, status: int = 200,
               **values: Any) -> HTMLResponse:
        page = self.env.get_template(template).render(
            request=request, who=who, csrf_field=CSRF_FIELD,
            csrf=self.auth.csrf_token(who.principal) if who and who.principal.via_session else "",
            can_operate=bool(who and who.principal.can(Role.OPERATOR)), cluster=self.cluster, **values)
        return HTMLResponse(page, status_code=status, headers=SECURITY_HEADERS)
