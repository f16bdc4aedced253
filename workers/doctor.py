"""`goodput doctor`: checks a host's set-up for the configured deployment and says what to fix.

Each check is independent and bounded in time (a hung scontrol or an unreachable Temporal must
not hang the doctor), and a check that depends on a failed one is reported as skipped rather than
failing twice. Nothing here changes the cluster: no drain, no job, no workflow is started.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from activities.adapters.node_agent import resolve_node
from activities.adapters.node_jobs import list_node_processes
from activities.adapters.slurm_runner import CommandRunner, LocalRunner
from goodput.cli.doctor import CheckResult, Status
from goodput.config import SchedulerKind, Settings
from goodput.detect.kernel_origin import MIXED_FIX, survey_kernel_log
from goodput.detect.node_jobs import NodeListingError
from goodput.scheduler import SchedulerError
from goodput.slurm.resubmit import ResubmitKey
from workers.client import connect_from
from workers.console.server import ConsoleConfigError, check_bind
from workers.worker import scheduler_from
from workflows import search

CHECK_TIMEOUT_S = 15.0
_FIX_BY_KIND = {
    SchedulerKind.SLURM_CLI: "run on a host with Slurm's client commands and a readable SLURM_CONF "
                             "(`scontrol ping` must work as the service user)",
    SchedulerKind.SLURM_SSH: "check slurm.ssh_host, the client key and known_hosts (`ssh HOST scontrol ping`)",
    SchedulerKind.SLURM_REST: "check slurm.rest_url and the JWT in slurm.rest_token_file",
    SchedulerKind.SLURM_PYSLURM: "install pyslurm matching the cluster's Slurm (`pip install goodput[pyslurm]`)",
    SchedulerKind.FAKE: "the demo cluster needs a writable data_dir",
}


async def _bounded(what: Callable[[], Awaitable[CheckResult]], name: str, fix: str) -> CheckResult:
    try:
        return await asyncio.wait_for(what(), CHECK_TIMEOUT_S)
    except TimeoutError:
        return CheckResult(name=name, status=Status.FAIL, found=f"no answer within {CHECK_TIMEOUT_S:.0f} s", fix=fix)
    except Exception as err:
        return CheckResult(name=name, status=Status.FAIL, found=f"{type(err).__name__}: {str(err)[:300]}", fix=fix)


async def run_checks(settings: Settings) -> list[CheckResult]:
    results = [_settings(settings), _data_dir(settings), _console(settings),
               kernel_log_check(settings.agent.kernel_log, accept_mixed=settings.agent.kernel_log_accept_mixed),
               await _bounded(lambda: agent_jobs_check(settings), "agent jobs", AGENT_JOBS_FIX)]
    client: Client | None = None

    async def temporal() -> CheckResult:
        nonlocal client
        client = await connect_from(settings)
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=settings.namespace))
        return CheckResult(name="temporal", status=Status.OK,
                           found=f"{settings.temporal_address}, namespace {settings.namespace}")

    results.append(await _bounded(temporal, "temporal", "start `goodput up`, or point --temporal / "
                                  "temporal_address and namespace at the Temporal cluster"))
    if client is None:
        results.append(CheckResult(name="search attributes", status=Status.SKIPPED, found="Temporal unreachable"))
    else:
        results.append(await _bounded(lambda: _search_attributes(client, settings), "search attributes",
                                      "run `goodput worker` once with operator rights on the namespace"))
    results += await _scheduler(settings)
    return results


def _settings(settings: Settings) -> CheckResult:
    modes = ", ".join(f"{p}={m}" for p, m in sorted(settings.policy.partition_modes.items()))
    return CheckResult(name="settings", status=Status.OK,
                       found=f"cluster {settings.cluster}, scheduler {settings.scheduler}, mode "
                             f"{settings.policy.mode}" + (f" ({modes})" if modes else ""))


def _data_dir(settings: Settings) -> CheckResult:
    path = settings.data_dir
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as err:
        return CheckResult(name="data dir", status=Status.FAIL, found=f"{path}: {err.strerror or err}",
                           fix=f"make {path} writable by {getpass.getuser()} (the audit log and keys live there)")
    return CheckResult(name="data dir", status=Status.OK, found=f"{path.resolve()} is writable")


def _console(settings: Settings) -> CheckResult:
    if not settings.console.enabled:
        return CheckResult(name="console", status=Status.SKIPPED, found="console.enabled = false")
    try:
        check_bind(settings.console)
    except ConsoleConfigError as err:
        return CheckResult(name="console", status=Status.FAIL, found=str(err),
                           fix="bind to loopback, or configure console.users and console.allow_remote")
    users = len(settings.console.users)
    return CheckResult(name="console", status=Status.OK if users else Status.WARN,
                       found=f"{settings.console.host}:{settings.console.port}, "
                             + (f"{users} user(s)" if users else "no users configured"),
                       fix="" if users else "configure console.users (viewer/operator/admin tokens) beyond a demo")


def kernel_log_check(path: Path | None, *, accept_mixed: bool) -> CheckResult:
    """The node agent's kernel log: an Xid in it drains the node, so only the kernel may write it."""
    name = "kernel log"
    if path is None:
        return CheckResult(name=name, status=Status.SKIPPED, found="agent.kernel_log unset (the node agent reads no "
                                                                  "kernel log, or gets --kernel-log)")
    try:
        survey = survey_kernel_log(path)
    except (OSError, ValueError) as err:
        return CheckResult(name=name, status=Status.FAIL, found=f"{path}: {err}",
                           fix="make it a regular file the agent's user can read")
    if survey.mixed:
        if accept_mixed:
            return CheckResult(name=name, status=Status.WARN, found=f"{survey.describe()}; read anyway "
                                                                    "(agent.kernel_log_accept_mixed)",
                               fix=MIXED_FIX)
        return CheckResult(name=name, status=Status.FAIL, found=f"{survey.describe()}; the agent refuses it",
                           fix=MIXED_FIX)
    if survey.by_configuration:
        return CheckResult(name=name, status=Status.WARN, found=survey.describe(),
                           fix="make sure only the kernel facility feeds it (a syslog file is kernel-only by the "
                               "daemon's configuration, not its content), or use `journalctl -k -f -o export`")
    return CheckResult(name=name, status=Status.OK, found=survey.describe())


AGENT_JOBS_FIX = ("install Slurm's scontrol on this node and set agent.node to slurmd's NodeName; else the agent "
                  "asks the controller for its node's jobs, the whole cluster's job list at slurmctld every "
                  "agent.job_refresh_s (agent.jobs_from = \"controller\" accepts that)")


async def agent_jobs_check(settings: Settings, runner: CommandRunner | None = None) -> CheckResult:
    """Whether this node's slurmd lists its jobs' processes, as the node agent reads them
    (docs/gpu-and-logs.md, Sizing); only where this host is set up as a node agent."""
    name = "agent jobs"
    agent = settings.agent
    if agent.jobs_from != "slurmd" or settings.scheduler is SchedulerKind.FAKE:
        return CheckResult(name=name, status=Status.SKIPPED,
                           found=f"the agent asks the controller (agent.jobs_from = {agent.jobs_from!r}, "
                                 f"scheduler {settings.scheduler})")
    if not agent.node and agent.kernel_log is None:
        return CheckResult(name=name, status=Status.SKIPPED,
                           found="this host is not set up as a node agent (agent.node and agent.kernel_log unset)")
    node = resolve_node(agent)
    try:
        listed = await list_node_processes(runner or LocalRunner(timeout_s=CHECK_TIMEOUT_S), node,
                                           timeout_s=CHECK_TIMEOUT_S)
    except (NodeListingError, SchedulerError, OSError) as err:
        return CheckResult(name=name, status=Status.WARN, found=f"scontrol listpids '*' {node}: {err}",
                           fix=AGENT_JOBS_FIX)
    return CheckResult(name=name, status=Status.OK,
                       found=f"{node}'s slurmd lists {len(listed)} job(s) with processes here (scontrol listpids)")


async def _search_attributes(client: Client, settings: Settings) -> CheckResult:
    found = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=settings.namespace))
    missing = [k.name for k in search.ALL_KEYS if k.name not in found.custom_attributes]
    if missing:
        return CheckResult(name="search attributes", status=Status.WARN, found=f"missing: {', '.join(missing)}",
                           fix="run `goodput worker` once with operator rights (incidents still work; the "
                               "console and the Temporal UI cannot filter without them)")
    return CheckResult(name="search attributes", status=Status.OK, found=f"all {len(search.ALL_KEYS)} registered")


async def _scheduler(settings: Settings) -> list[CheckResult]:
    fix = _FIX_BY_KIND[settings.scheduler]
    try:
        scheduler = scheduler_from(settings, resubmit_key=ResubmitKey.ephemeral(settings.cluster))
    except (OSError, ValueError) as err:  # a backend that cannot even be built (settings, files)
        return [CheckResult(name="slurm nodes", status=Status.FAIL, found=f"{type(err).__name__}: {err}", fix=fix),
                CheckResult(name="slurm jobs", status=Status.SKIPPED, found="Slurm unreachable"),
                CheckResult(name="drain rights", status=Status.SKIPPED, found="Slurm unreachable")]
    counts: dict[str, int] = {}

    async def nodes() -> CheckResult:
        listed = await scheduler.list_nodes()
        counts["nodes"] = len(listed)
        drained = [n.name for n in listed if n.drained]
        return CheckResult(name="slurm nodes", status=Status.OK if listed else Status.WARN,
                           found=f"{len(listed)} node(s) ({len(drained)} drained)",
                           fix="" if listed else "the scheduler lists no nodes: is this the right cluster?")

    async def jobs() -> CheckResult:
        listed = await scheduler.list_jobs()
        marker = settings.opt_in.comment_marker
        opted = [j for j in listed if marker in j.comment or j.partition in settings.opt_in.partitions]
        return CheckResult(name="slurm jobs", status=Status.OK,
                           found=f"{len(listed)} job(s), {len(opted)} opted in (comment {marker!r}"
                                 + (f" or partitions {', '.join(settings.opt_in.partitions)}" if
                                    settings.opt_in.partitions else "") + ")")

    results = [await _bounded(nodes, "slurm nodes", fix)]
    if results[0].status is Status.FAIL:
        return [*results, CheckResult(name="slurm jobs", status=Status.SKIPPED, found="Slurm unreachable"),
                CheckResult(name="drain rights", status=Status.SKIPPED, found="Slurm unreachable")]
    results.append(await _bounded(jobs, "slurm jobs", fix))
    results.append(await _bounded(lambda: _drain_rights(settings), "drain rights",
                                  "make the service user a Slurm operator: sacctmgr modify user NAME set "
                                  "adminlevel=operator"))
    return results


async def _drain_rights(settings: Settings) -> CheckResult:
    """Without draining anything: root and SlurmUser may; anyone else needs the operator level,
    which only slurmdbd knows (a warning, not a failure, when it cannot be asked)."""
    if settings.scheduler is not SchedulerKind.SLURM_CLI:
        return CheckResult(name="drain rights", status=Status.SKIPPED,
                           found=f"checked only for slurm-cli ({settings.scheduler} acts as its configured user)")
    me = getpass.getuser()
    if os.geteuid() == 0:
        return CheckResult(name="drain rights", status=Status.OK, found="running as root")
    runner = LocalRunner(timeout_s=CHECK_TIMEOUT_S)
    config = await runner.run(["scontrol", "show", "config"])
    slurm_user = next((line.split("=", 1)[1].strip().split("(")[0] for line in config.stdout.splitlines()
                       if line.strip().startswith("SlurmUser")), "")
    if me == slurm_user:
        return CheckResult(name="drain rights", status=Status.OK, found=f"{me} is SlurmUser")
    level = await runner.run(["sacctmgr", "--noheader", "--parsable2", "show", "user", me, "format=adminlevel"])
    if level.returncode == 0 and level.stdout.strip() in ("Operator", "Administrator"):
        return CheckResult(name="drain rights", status=Status.OK, found=f"{me} is a Slurm {level.stdout.strip()}")
    return CheckResult(name="drain rights", status=Status.WARN,
                       found=f"{me} is neither root, SlurmUser ({slurm_user or '?'}) nor a known operator",
                       fix=f"sacctmgr modify user {me} set adminlevel=operator (drains would be refused)")

