"""The long-running commands: `up` (dev server, worker, console), `worker`, `console`, `agent`.

Each runs until SIGINT or SIGTERM and then stops what it started in reverse order, so a stopped
`goodput up` leaves no dev server, port or half-written metrics export behind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from rich.console import Console
from temporalio.client import Client

from activities.adapters.layout import layout_store_for
from activities.adapters.node_agent import run_agent
from goodput.config import SchedulerKind, Settings
from goodput.detect.gpu_feed import GpuSampleStore
from goodput.detect.node_agent import AgentConfig
from goodput.detect.stack_requests import StackRequestTable
from goodput.slurm.resubmit import ResubmitKey
from workers import devserver
from workers.client import TemporalIncidentService, connect_from
from workers.console.server import serve_console
from workers.console.wiring import console_context
from workers.gpu_feed import evidence_sink, gpu_store_for
from workers.liveness import serve_liveness
from workers.nvsentinel.server import serve_nvsentinel
from workers.push import serve_push
from workers.readiness import connect_when_ready
from workers.telemetry import setup_metrics, setup_tracing
from workers.watch import IncidentSink, start_cluster_watch
from workers.worker import ensure_search_attributes, liveness_worker_for, scheduler_from, worker_for


def start_telemetry(settings: Settings, metrics_file: Path | None) -> Callable[[], None]:
    """Metrics (JSON file, /metrics, OTLP when configured) and traces (OTLP when configured); the
    returned function flushes and stops both."""
    metrics = setup_metrics(metrics_file, settings.metrics_interval_s, otlp_endpoint=settings.otlp_endpoint,
                            clusters=(settings.cluster,))
    tracing = setup_tracing(settings.otlp_endpoint)

    def stop() -> None:
        metrics.shutdown()
        if tracing is not None:
            tracing.shutdown()

    return stop


def stack_table_for(settings: Settings) -> StackRequestTable | None:
    """The stack requests the worker's hang incidents leave for the heartbeat endpoint in this same
    process (goodput.detect.stack_requests); None while that endpoint is off."""
    if not settings.liveness.enabled:
        return None
    # A request outlives its incident's wait a little, so a late answer is refused as expired, not unknown.
    return StackRequestTable(ttl_s=settings.liveness.stack_wait_s + 30.0)


async def run_until_signalled(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await main(stop)


@contextlib.asynccontextmanager
async def service_extras(settings: Settings, client: Client, console: Console, *,
                         gpu_samples: GpuSampleStore | None = None,
                         stacks: StackRequestTable | None = None) -> AsyncIterator[None]:
    """What runs beside a worker: the cluster watcher and, when enabled, the log push endpoint, the
    NVSentinel receivers and the agents' heartbeat endpoint (with the GPU feed into `gpu_samples`,
    which explains the stragglers and hangs they submit) with its node-loss monitor."""
    if settings.watch:
        await start_cluster_watch(client, settings.task_queue, settings.watch_request())
    if not (settings.push.enabled or settings.nvsentinel.enabled or settings.liveness.enabled):
        yield
        return
    # Stragglers and hangs explained by the GPU samples here, or by the liveness process's elsewhere.
    sink = evidence_sink(client, settings.task_queue, settings.policy, scheduler_from(
        settings, resubmit_key=ResubmitKey.ephemeral(settings.cluster)), gpu_samples=gpu_samples)
    async with contextlib.AsyncExitStack() as stack:
        if settings.push.enabled:
            server = await stack.enter_async_context(serve_push(settings.push, sink, settings.cluster,
                                                                layouts=layout_store_for(settings.data_dir)))
            console.print(f"log push endpoint at {server.url}")
        if settings.nvsentinel.enabled:
            # The receivers read Slurm (node, jobs) and never resubmit: no deployment key needed.
            scheduler = scheduler_from(settings, resubmit_key=ResubmitKey.ephemeral(settings.cluster))
            receivers = await stack.enter_async_context(serve_nvsentinel(
                settings.nvsentinel, scheduler, sink, settings.cluster, settings.opt_in))
            console.print(receivers.describe(), highlight=False)
        if settings.liveness.enabled:
            scheduler = scheduler_from(settings, resubmit_key=ResubmitKey.ephemeral(settings.cluster))
            beats = await stack.enter_async_context(serve_liveness(
                settings.liveness, scheduler, sink, settings.cluster, settings.opt_in, gpu_samples=gpu_samples,
                stacks=stacks))
            console.print(f"agents' heartbeats at {beats.url}", highlight=False)
        yield


@contextlib.asynccontextmanager
async def console_if_enabled(settings: Settings, client: Client, console: Console) -> AsyncIterator[None]:
    """The Recovery Console and /metrics, announced with where to log in: a one-time link for the
    embedded default's admin (single use, 10 minutes) and the file holding its token, never the
    token itself."""
    if not settings.console.enabled:
        yield
        return
    ctx, token_file = console_context(settings, client)
    async with serve_console(ctx, settings.console, token_file) as served:
        login = f" (log in with the token in {served.admin_token_file})" if served.admin_token_file else ""
        console.print(f"console at {served.url}{login}; Prometheus metrics at {served.url}/metrics", highlight=False)
        if served.login_url:
            # soft_wrap: the link stays one line a terminal can open, however narrow.
            console.print(f"log in once (valid 10 minutes, single use): {served.login_url}", highlight=False,
                          markup=False, soft_wrap=True)
        yield


async def cmd_up(settings: Settings, console: Console) -> int:
    stop_telemetry = start_telemetry(settings, settings.metrics_file or settings.data_dir / "metrics.jsonl")
    _, port = settings.temporal_host_port()
    server = devserver.start(port=port, ui_port=settings.temporal_ui_port, db_file=settings.temporal_db,
                             log_file=settings.data_dir / "temporal.log", wal=settings.temporal_sqlite_wal)
    try:
        client = await connect_when_ready(
            lambda: connect_from(settings), namespace=settings.namespace,
            what=f"the Temporal dev server at {settings.temporal_address}",
            timeout_s=settings.temporal_ready_timeout_s, say=lambda text: console.print(text, highlight=False))
        gpu_samples = gpu_store_for(settings.liveness)  # one store: the feed fills it, the sinks read it
        stacks = stack_table_for(settings)  # one table: the incidents ask, the heartbeats deliver
        worker = worker_for(client, settings, gpu_samples=gpu_samples, stacks=stacks)
        liveness = liveness_worker_for(client, settings, gpu_samples=gpu_samples, stacks=stacks)

        async def serve(stop: asyncio.Event) -> None:
            async with worker, liveness or contextlib.nullcontext(), service_extras(
                    settings, client, console, gpu_samples=gpu_samples, stacks=stacks), console_if_enabled(
                    settings, client, console):
                console.print(f"goodput is up: Temporal at {settings.temporal_address}, "
                              f"UI at http://127.0.0.1:{settings.temporal_ui_port} "
                              f"(namespace {settings.namespace}), mode [bold]{settings.policy.mode}[/], "
                              f"data in {settings.data_dir}. Ctrl-C stops.")
                await stop.wait()
                console.print("stopping…")

        await run_until_signalled(serve)
    finally:
        stop_telemetry()  # flushes the last metrics export and queued spans
        devserver.stop(server)
    return 0


async def cmd_worker(settings: Settings, console: Console) -> int:
    stop_telemetry = start_telemetry(settings, settings.metrics_file)
    # Started beside a server still coming up (a unit, a pod), the worker waits for it a while.
    client = await connect_when_ready(lambda: connect_from(settings), namespace=settings.namespace,
                                      what=f"Temporal at {settings.temporal_address}",
                                      timeout_s=settings.temporal_ready_timeout_s,
                                      say=lambda text: console.print(text, highlight=False))
    await ensure_search_attributes(client, settings.namespace)
    gpu_samples = gpu_store_for(settings.liveness)
    stacks = stack_table_for(settings)
    worker = worker_for(client, settings, gpu_samples=gpu_samples, stacks=stacks)
    # With [liveness] on, this process also polls the liveness queue: the stores' readers run here.
    liveness = liveness_worker_for(client, settings, gpu_samples=gpu_samples, stacks=stacks)

    async def serve(stop: asyncio.Event) -> None:
        async with worker, liveness or contextlib.nullcontext(), service_extras(
                settings, client, console, gpu_samples=gpu_samples, stacks=stacks):
            console.print(f"goodput worker on {settings.temporal_address} queue {settings.task_queue}")
            await stop.wait()

    try:
        await run_until_signalled(serve)
    finally:
        stop_telemetry()
    return 0


async def cmd_agent(args: argparse.Namespace, settings: Settings) -> int:
    flags = {"probe": args.probe, "kernel_log": args.kernel_log, "node": args.node}
    config = AgentConfig.model_validate({**settings.agent.model_dump(), **{k: v for k, v in flags.items() if v}})
    if settings.scheduler is SchedulerKind.FAKE:  # the demo cluster has no slurmd to list its processes
        config = config.model_copy(update={"jobs_from": "controller"})
    client = await connect_from(settings)
    # A node agent reports; the service's policy (None) governs its incidents, not the node's settings.
    sink = IncidentSink(TemporalIncidentService(client, settings.task_queue), None)
    # The agent drains nodes and never resubmits: no deployment key (nor key file) needed here.
    scheduler = scheduler_from(settings, resubmit_key=ResubmitKey.ephemeral(settings.cluster))
    stop_telemetry = start_telemetry(settings, settings.metrics_file)
    try:
        await run_until_signalled(lambda stop: run_agent(config, settings.cluster, scheduler, sink, stop,
                                                         opt_in=settings.opt_in))
    finally:
        stop_telemetry()
    return 0




async def cmd_console(settings: Settings, console: Console) -> int:
    """The console alone, against a running service (its workers elsewhere)."""
    client = await connect_from(settings)
    settings = settings.model_copy(update={"console": settings.console.model_copy(update={"enabled": True})})
    # Its /metrics is the chart's readiness probe: the process's own series (zero until it records)
    # make it answer 200 from start-up, never 503 "not set up".
    stop_telemetry = start_telemetry(settings, settings.metrics_file)

    async def serve(stop: asyncio.Event) -> None:
        async with console_if_enabled(settings, client, console):
            await stop.wait()

    try:
        await run_until_signalled(serve)
    finally:
        stop_telemetry()
    return 0
