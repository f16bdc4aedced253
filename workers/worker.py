"""Building and running the goodput worker: the incidents' queue, the entities' queue, their activities.

The composition root for adapters: settings decide which scheduler and notifier the activities
get. Also registers goodput's search attributes on an external Temporal cluster so the UI can
filter incidents there too.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta
from types import TracebackType

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.adapters.audit import JsonlAuditLog
from activities.adapters.breaker import TemporalDrainGate
from activities.adapters.kill_switch import TemporalKillSwitch
from activities.adapters.layout import layout_store_for
from activities.adapters.liveness_queue import TemporalLivenessPresence
from activities.adapters.node_health import TemporalNodeHealth
from activities.adapters.node_incident import TemporalNodeIncidents
from activities.adapters.node_memory import TemporalNodeMemory
from activities.adapters.notify import FanOutNotifier, WebhookNotifier
from activities.adapters.nvsentinel import VerdictPushBack
from activities.adapters.slurm_cli import SlurmCliBackend
from activities.adapters.slurm_owner import OwnerSubmission
from activities.adapters.slurm_pyslurm import PyslurmBackend
from activities.adapters.slurm_rest import SlurmRestBackend
from activities.adapters.slurm_runner import LocalRunner
from activities.adapters.trust import TemporalTrustRecord
from activities.liveness_route import LivenessRouteActivities
from activities.node_incident import NodeIncidentActivities
from activities.recovery import RecoveryActivities
from activities.spares import SpareActivities
from activities.stack_requests import StackActivities
from activities.watch import WatchActivities
from goodput.config import SchedulerKind, Settings
from goodput.demo.scheduler import FakeScheduler
from goodput.detect.gpu_feed import GpuSampleStore
from goodput.detect.stack_requests import StackRequestTable
from goodput.detect.watch import OptInRule
from goodput.diagnose.layout import LayoutSource
from goodput.diagnose.signatures import default_catalogue
from goodput.entity_lane import entity_queue
from goodput.extras import require
from goodput.recover.audit import AuditLog
from goodput.recover.breaker import DrainGate
from goodput.recover.notify import JsonLinesNotifier, Notifier
from goodput.recover.policy import Policy
from goodput.scheduler import Scheduler
from goodput.slurm.resubmit import ResubmitKey
from workers.gpu_feed import evidence_sink
from workers.liveness_worker import build_liveness_worker
from workers.resubmit_key import resubmit_key_from
from workers.watch import TemporalWatchLauncher
from workflows import search
from workflows.breaker import DrainBreakerWorkflow
from workflows.kill_switch import KillSwitchWorkflow
from workflows.node_health import NodeHealthWorkflow
from workflows.node_incident import NodeIncidentWorkflow
from workflows.node_memory import NodeMemoryWorkflow
from workflows.recovery import RecoveryWorkflow
from workflows.trust import TrustRecordWorkflow
from workflows.watch import ClusterWatchWorkflow, JobWatchWorkflow

log = logging.getLogger("goodput.worker")


def scheduler_from(settings: Settings, *, resubmit_key: ResubmitKey | None = None) -> Scheduler:
    """The one place that knows every backend; docs/slurm.md explains the deployment modes.

    `resubmit_key` defaults to the deployment's (settings, or <data_dir>/resubmit.key); a process
    that never resubmits (the node agent) passes an ephemeral one instead.
    """
    key = resubmit_key if resubmit_key is not None else resubmit_key_from(settings)
    if settings.scheduler is SchedulerKind.FAKE:
        return FakeScheduler(state_path=settings.fake_state_path,
                             action_delay_s=settings.fake_action_delay_s, resubmit_key=key)
    slurm = settings.slurm
    partitions, marker, enforce = (settings.opt_in.partitions, settings.opt_in.comment_marker,
                                   not settings.opt_in.all_jobs)
    if settings.scheduler is SchedulerKind.SLURM_PYSLURM:
        return PyslurmBackend(allow_partitions=partitions, comment_marker=marker, enforce_opt_in=enforce,
                              resubmit_key=key, resubmit_path=slurm.resubmit_path)
    # Resubmissions run as the job's owner (docs/slurm.md, "How resubmission runs").
    local = SlurmCliBackend(LocalRunner(timeout_s=slurm.command_timeout_s), allow_partitions=partitions,
                            comment_marker=marker, enforce_opt_in=enforce, resubmit_key=key,
                            submission=OwnerSubmission(mode=slurm.resubmit_as, path=slurm.resubmit_path))
    if settings.scheduler is SchedulerKind.SLURM_CLI:
        return local
    ssh: Scheduler | None = None
    if slurm.ssh_host:
        require("ssh")  # before the adapter's import, so a lean install says which extra it lacks
        from activities.adapters.slurm_ssh import slurm_ssh_backend

        ssh, _ = slurm_ssh_backend(
            slurm.ssh_host, known_hosts=slurm.ssh_known_hosts.expanduser(), port=slurm.ssh_port,
            username=slurm.ssh_user, client_keys=[k.expanduser() for k in slurm.ssh_client_keys],
            env={"SLURM_CONF": slurm.ssh_slurm_conf} if slurm.ssh_slurm_conf else None,
            allow_partitions=partitions, comment_marker=marker, enforce_opt_in=enforce, resubmit_key=key,
            resubmit_as=slurm.resubmit_as, resubmit_path=slurm.resubmit_path, timeout_s=slurm.command_timeout_s)
    if settings.scheduler is SchedulerKind.SLURM_SSH:
        if ssh is None:
            raise ValueError("scheduler slurm-ssh needs slurm.ssh_host")
        return ssh
    if not slurm.rest_url or slurm.rest_token_file is None:
        raise ValueError("scheduler slurm-rest needs slurm.rest_url and slurm.rest_token_file")
    token_file = slurm.rest_token_file.expanduser()

    def token() -> str:
        return token_file.read_text().strip()  # re-read: tokens are rotated on disk

    # What slurmrestd cannot do (requeue, resubmit as the owner, exclusions, dependencies) goes over
    # SSH to a login node when one is configured (a pod has no Slurm clients), else to local commands.
    return SlurmRestBackend(slurm.rest_url, user=slurm.rest_user, token=token, fallback=ssh or local,
                            allow_partitions=partitions, comment_marker=marker, enforce_opt_in=enforce,
                            allow_http=slurm.rest_allow_http, ca_file=slurm.rest_ca_file,
                            timeout_s=slurm.command_timeout_s)


WORKFLOW_TASK_POLLS = 16
NONSTICKY_POLL_RATIO = 0.5


# The entities' queue carries two workflows, one per cluster: a few polls keep it answered.
ENTITY_WORKFLOW_TASK_POLLS = 4


class ServiceWorker:
    """The incidents' worker and the entities' (goodput.entity_lane), started and stopped together
    in one process: every process that runs incidents also answers its clusters' node memory and
    track record, so the entities never depend on a process of their own."""

    def __init__(self, incidents: Worker, entities: Worker) -> None:
        self.incidents = incidents
        self.entities = entities
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def task_queue(self) -> str:
        return self.incidents.task_queue

    async def __aenter__(self) -> ServiceWorker:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.entities)
            await stack.enter_async_context(self.incidents)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(kind, error, trace)


def build_worker(client: Client, task_queue: str, scheduler: Scheduler, notifier: Notifier, *,
                 gate: DrainGate | None = None, policy: Policy | None = None,
                 fail_workflows_on_bugs: bool = False, audit_log: AuditLog | None = None,
                 layouts: LayoutSource | None = None, gpu_samples: GpuSampleStore | None = None,
                 stacks: StackRequestTable | None = None, stack_wait_s: float = 30.0,
                 opt_in: OptInRule | None = None, liveness_here: bool = False) -> ServiceWorker:
    recovery = RecoveryActivities(scheduler, notifier, gate or TemporalDrainGate(client, task_queue),
                                  memory=TemporalNodeMemory(client, task_queue), audit_log=audit_log, layouts=layouts,
                                  kill_switch=TemporalKillSwitch(client, task_queue),
                                  node_health=TemporalNodeHealth(client, task_queue), policy=policy,
                                  trust=TemporalTrustRecord(client, task_queue))
    # Anomalies the watchers find open incidents with the service's policy; stragglers and hangs
    # explained by the agents' GPU samples, here or in the liveness process.
    sink = evidence_sink(client, task_queue, policy or Policy(), scheduler, gpu_samples=gpu_samples)
    watch = WatchActivities(scheduler, sink, TemporalWatchLauncher(client, task_queue))
    node_incidents = NodeIncidentActivities(TemporalNodeIncidents(client, task_queue), scheduler)
    bugs: list[type[BaseException]] = [Exception] if fail_workflows_on_bugs else []
    # The record writes its autonomy changes through the audit activity, on its own queue.
    entities = Worker(client, task_queue=entity_queue(task_queue), workflows=[NodeMemoryWorkflow, TrustRecordWorkflow],
                      activities=[recovery.audit], sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
                      max_concurrent_workflow_task_polls=ENTITY_WORKFLOW_TASK_POLLS,
                      workflow_failure_exception_types=bugs, graceful_shutdown_timeout=timedelta(seconds=5))
    incidents = Worker(
        client,
        task_queue=task_queue,
        # The entities too: those started here before the entities' queue existed stay here
        # until they continue as new (workflows.entity_lane).
        workflows=[RecoveryWorkflow, DrainBreakerWorkflow, NodeMemoryWorkflow, JobWatchWorkflow,
                   ClusterWatchWorkflow, KillSwitchWorkflow, NodeHealthWorkflow, NodeIncidentWorkflow,
                   TrustRecordWorkflow],
        activities=[*recovery.all(), *node_incidents.all(),
                    watch.watch_job_logs, watch.watch_scheduler, *SpareActivities(scheduler).all(),
                    # Where the agents' stores are (the liveness queue, when some process polls it).
                    *LivenessRouteActivities(TemporalLivenessPresence(client, task_queue),
                                             here=liveness_here).all(),
                    # Incidents from before "liveness-queue" ask for stacks here, in whichever worker.
                    *StackActivities(scheduler, stacks, wait_s=stack_wait_s, opt_in=opt_in).all()],
        # A dead worker's sticky workflows move to a live one after this, not the 10 s default.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
        # Polls, not CPU, bound a storm: a worker 0.2 cores busy left each incident's first task
        # (the shared queue gets a fifth of the polls) waiting 13-18 s (docs/scaling.md, #29).
        max_concurrent_workflow_task_polls=WORKFLOW_TASK_POLLS,
        nonsticky_to_sticky_poll_ratio=NONSTICKY_POLL_RATIO,
        # Tests want a forbidden call in workflow code to fail loudly, not retry the task forever.
        workflow_failure_exception_types=bugs,
        graceful_shutdown_timeout=timedelta(seconds=5),
        # Watchers are long-running activities: leave room for many beside the recovery steps.
        max_concurrent_activities=5000,
    )
    return ServiceWorker(incidents, entities)


def worker_for(client: Client, settings: Settings, *, gpu_samples: GpuSampleStore | None = None,
               stacks: StackRequestTable | None = None) -> ServiceWorker:
    """The shared-queue worker and the entities'; with `[liveness]` on, `liveness_worker_for` runs beside it."""
    notifier: Notifier = JsonLinesNotifier(settings.notifications_path)
    if settings.notify_webhook_url:
        notifier = FanOutNotifier(notifier, WebhookNotifier(settings.notify_webhook_url,
                                                            ui_url=settings.notify_ui_url or None))
    audit_log: AuditLog = JsonlAuditLog(settings.audit_path)
    if settings.nvsentinel.push_back.enabled:  # drains are also told to NVSentinel, as STORE_ONLY events
        audit_log = VerdictPushBack(audit_log, settings.nvsentinel.push_back, node_names=settings.nvsentinel.node_names)
    # Loaded here, not by a storm's first incident (~0.13 s, more on a busy core; cached after).
    default_catalogue()
    return build_worker(client, settings.task_queue, scheduler_from(settings), notifier, policy=settings.policy,
                        audit_log=audit_log, layouts=layout_store_for(settings.data_dir), gpu_samples=gpu_samples,
                        stacks=stacks, stack_wait_s=settings.liveness.stack_wait_s, opt_in=settings.opt_in,
                        liveness_here=settings.liveness.enabled)


def liveness_worker_for(client: Client, settings: Settings, *, gpu_samples: GpuSampleStore | None,
                        stacks: StackRequestTable | None) -> Worker | None:
    """The worker on the liveness queue (workers.liveness_worker), in the process with `[liveness]` on."""
    if not settings.liveness.enabled:
        return None
    # It reads jobs and never resubmits: no deployment key needed.
    scheduler = scheduler_from(settings, resubmit_key=ResubmitKey.ephemeral(settings.cluster))
    return build_liveness_worker(client, settings.task_queue, scheduler, stacks=stacks,
                                 gpu_samples=gpu_samples, stack_wait_s=settings.liveness.stack_wait_s,
                                 opt_in=settings.opt_in)


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Idempotent; a cluster that forbids it (no operator rights) only loses UI filtering."""
    wanted = {key.name: (IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST
                         if key.indexed_value_type.name == "KEYWORD_LIST"
                         else IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD)
              for key in search.ALL_KEYS}
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace))
        missing = {k: v for k, v in wanted.items() if k not in existing.custom_attributes}
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing))
    except RPCError as err:
        log.warning("could not register search attributes on %s: %s", namespace, err)
