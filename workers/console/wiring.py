"""Builds the console for a running service from its settings: the one place that knows where the
audit log, the Temporal UI and the scheduler are."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from goodput.config import Settings
from goodput.slurm.resubmit import ResubmitKey
from workers.console.backend import ConsoleBackend
from workers.console.context import ConsoleContext
from workers.console.server import authenticator
from workers.worker import scheduler_from


def console_context(settings: Settings, client: Client) -> tuple[ConsoleContext, Path | None]:
    auth, token_file = authenticator(settings.console, settings.data_dir)
    # Read-only use (who drained which node); the console never resubmits, so no deployment key.
    scheduler = scheduler_from(settings, resubmit_key=ResubmitKey.ephemeral(settings.cluster))
    ctx = ConsoleContext(
        backend=ConsoleBackend(client, settings.task_queue), auth=auth, policy=settings.policy,
        cluster=settings.cluster, audit_path=settings.audit_path, namespace=settings.namespace,
        temporal_ui_url=settings.console.temporal_ui_url or f"http://127.0.0.1:{settings.temporal_ui_port}",
        refresh_s=settings.console.refresh_s, counts_refresh_s=settings.console.counts_refresh_s,
        overview_refresh_s=settings.console.overview_refresh_s, scheduler=scheduler,
        manual_recovery_s=settings.console.manual_recovery_min * 60,
        max_streams_per_user=settings.console.max_streams_per_user)
    return ctx, token_file
