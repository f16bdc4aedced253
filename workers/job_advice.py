"""Reads what goodput measured about one job, for its checkpoint interval advice.

`goodput advise --job` and the console's Checkpoint interval page ask the same questions of the
same places: the scheduler (the job's nodes and owner, the nodes' gres, the cluster's size), the
job's checkpoint tree (through the checkpoint finder, as the recovery's find-checkpoint step reads
it: as the owner where goodput can switch users, confined and bounded), the job's running watcher
(its last heartbeat carries the step times the hang detector learned) and the incidents goodput
recorded (node faults). A source that cannot be read becomes a note in the advice, never an error:
the advice then names what is missing. The arithmetic is goodput.checkpoints.job_advice's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TextIO

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.adapters.checkpoints import default_finder
from goodput.checkpoints import Checkpoint, CheckpointFinder, ScanLimits
from goodput.checkpoints.finder import find_for_job
from goodput.checkpoints.job_advice import (
    JobAdvice,
    Overrides,
    assemble,
    failure_rate,
    job_gpus,
    render,
    step_time,
)
from goodput.config import Settings
from goodput.detect.watch import WatchCheckpoint
from goodput.scheduler import JobInfo, NodeInfo, Scheduler, SchedulerError
from goodput.service.incidents import IncidentSummary, ServiceError
from goodput.slurm.resubmit import ResubmitKey
from workers.client import TemporalIncidentService, connect_from
from workers.worker import scheduler_from
from workflows.watch import job_watch_id

log = logging.getLogger("goodput.advise")
WATCH_RPC_TIMEOUT = timedelta(seconds=5)
INCIDENT_LIMIT = 10_000  # newest incidents the CLI counts node faults over


async def watched_step_times(client: Client, cluster: str, job: JobInfo) -> tuple[float, ...]:
    """The step times the job's running watcher learned (its last heartbeat), or () when no
    watcher of this attempt is running or it has heartbeated none yet."""
    handle = client.get_workflow_handle(job_watch_id(cluster, job.job_id, job.restart_count))
    try:
        described = await handle.describe(rpc_timeout=WATCH_RPC_TIMEOUT)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            log.warning("could not read the watcher of job %s: %s", job.job_id, err)
        return ()
    for pending in described.raw_description.pending_activities:
        if pending.heartbeat_details.payloads:
            [details] = await client.data_converter.decode(pending.heartbeat_details.payloads, [WatchCheckpoint])
            if isinstance(details, WatchCheckpoint) and details.live is not None:
                return details.live.progress.step_times
    return ()


async def gather(job: JobInfo, cluster: str, *, scheduler: Scheduler | None, finder: CheckpointFinder,
                 client: Client | None, incidents: Sequence[IncidentSummary] | None, limit_reached: bool,
                 reported_step_times: Sequence[float] = (), gpus_per_node: int, overrides: Overrides,
                 now: datetime, limits: ScanLimits | None = None,
                 incidents_note: str = "goodput's incidents could not be listed") -> JobAdvice:
    """The advice for `job`: every source read that the overrides do not make unnecessary."""
    finding, note = await find_for_job(finder, job, now, limits)
    checkpoints: Sequence[Checkpoint] = finding.discovery.checkpoints if finding and finding.discovery else ()
    nodes: Sequence[NodeInfo] = ()
    nodes_note = "this process has no scheduler to ask"
    if scheduler is not None and (overrides.gpus is None or overrides.cluster_nodes is None):
        try:
            nodes = await scheduler.list_nodes()
        except (SchedulerError, OSError) as err:
            nodes_note = f"the scheduler could not list nodes: {str(err)[:200]}"
    cluster_nodes = overrides.cluster_nodes or len(nodes) or None
    watched: tuple[float, ...] = ()
    if overrides.step_time_s is None and client is not None:
        watched = await watched_step_times(client, cluster, job)
    failures = None
    failures_note = incidents_note
    if cluster_nodes is None:
        failures_note = f"the cluster's node count is unknown ({nodes_note}); or give --cluster-nodes M"
    elif incidents is not None:
        failures = failure_rate(incidents, cluster_nodes=cluster_nodes, now=now, window=overrides.window,
                                limit_reached=limit_reached)
    return assemble(job, cluster, checkpoints=checkpoints, checkpoint_note=note,
                    gpus=job_gpus(job, nodes, gpus_per_node),
                    step=step_time(watched, reported_step_times, job.restart_count), failures=failures,
                    failures_note=failures_note, overrides=overrides)


async def run_advise_job(settings: Settings, job_id: str, cluster: str, overrides: Overrides, *, as_json: bool,
                         out: TextIO) -> int:
    """`goodput advise --job JOB`: 0 with advice, 1 when something could not be measured (the
    output says what and which flag supplies it). Temporal is asked only for what the flags leave."""
    # Read-only use of the scheduler (the job's record, node list): never resubmits.
    scheduler = scheduler_from(settings, resubmit_key=ResubmitKey.ephemeral(cluster))
    try:
        job = await scheduler.get_job(job_id)
    except SchedulerError as err:
        raise ServiceError(f"job {job_id}: {err}") from err
    client: Client | None = None
    incidents: Sequence[IncidentSummary] | None = None
    note = "goodput's incidents were not needed"
    if overrides.step_time_s is None or overrides.mtbf_hours is None:
        try:
            client = await connect_from(settings)
            if overrides.mtbf_hours is None:
                incidents = await TemporalIncidentService(client, settings.task_queue).list_incidents(
                    limit=INCIDENT_LIMIT, cluster=cluster)
        except ServiceError as err:
            note = f"goodput's incidents could not be listed: {err}"
    advice = await gather(job, cluster, scheduler=scheduler, finder=default_finder(), client=client,
                          incidents=incidents, limit_reached=incidents is not None and len(incidents) >= INCIDENT_LIMIT,
                          gpus_per_node=settings.policy.gpus_per_node, overrides=overrides,
                          now=datetime.now(UTC), incidents_note=note)
    out.write(advice.model_dump_json() + "\n" if as_json else render(advice))
    return 0 if advice.advice is not None else 1
