"""A served console on the real Temporal dev server, with a worker on a fake cluster, a viewer, an
operator and their tokens: what the console's HTTP and browser tests stand on."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from activities.adapters.audit import JsonlAuditLog
from goodput.config import ConsoleSettings
from goodput.console.auth import ConsoleUser, TokenAuthenticator
from goodput.demo.scheduler import FakeScheduler
from goodput.models import Mode
from goodput.recover.policy import Policy
from tests.workflows.helpers import FAST, running_worker
from workers.console.backend import ConsoleBackend
from workers.console.context import ConsoleContext
from workers.console.server import serve_console

VIEWER_TOKEN = "viewer-token-" + "v" * 20
OPERATOR_TOKEN = "operator-token-" + "o" * 20
USERS = (ConsoleUser(name="vera", role="viewer", token=VIEWER_TOKEN),
         ConsoleUser(name="olga", role="operator", token=OPERATOR_TOKEN))


@dataclass
class Console:
    url: str
    cluster: str
    task_queue: str
    fake: FakeScheduler
    audit: JsonlAuditLog
    ctx: ConsoleContext

    def bearer(self, token: str = OPERATOR_TOKEN) -> dict[str, str]:
        return {"authorization": f"Bearer {token}"}


@asynccontextmanager
async def served_console(client: Client, task_queue: str, tmp_path: Path,
                         policy: Policy = FAST) -> AsyncIterator[Console]:
    cluster = f"c{uuid.uuid4().hex[:6]}"
    audit = JsonlAuditLog(tmp_path / "audit.jsonl")
    policy = policy.model_copy(update={"partition_modes": {"gpu": Mode.AUTONOMOUS, "debug": Mode.APPROVE}})
    settings = ConsoleSettings(port=0)
    async with running_worker(client, task_queue, audit_log=audit) as fake:
        ctx = ConsoleContext(backend=ConsoleBackend(client, task_queue),
                             auth=TokenAuthenticator(USERS, b"s" * 32), policy=policy, cluster=cluster,
                             audit_path=audit.path, temporal_ui_url="http://127.0.0.1:8233", namespace="default",
                             refresh_s=0.2, counts_refresh_s=0.2, overview_refresh_s=0.2, scheduler=fake)
        async with serve_console(ctx, settings, None) as served:
            yield Console(url=served.url, cluster=cluster, task_queue=task_queue, fake=fake, audit=audit, ctx=ctx)
