"""`goodput` console script: the composition root that wires the pure CLI to Temporal.

`up` runs the whole service on the embedded default (dev server + worker, monitor mode);
`worker` joins an external Temporal; the rest are operator commands against a running service.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from activities.adapters.gpu_nvml import NvmlUnavailableError
from goodput.checkpoints import LAYOUTS
from goodput.checkpoints.job_advice import Overrides
from goodput.checkpoints.model import DEFAULT_SETTLE_S
from goodput.checkpoints.report import run_checkpoints
from goodput.cli.anomaly_input import AnomalyInputError
from goodput.cli.doctor import exit_code as doctor_exit_code
from goodput.cli.doctor import render as render_doctor
from goodput.cli.terminal import terminal_text
from goodput.cli.trust import REASON_KINDS
from goodput.config import Settings
from goodput.config_sources import SettingsError, check_data_dir, config_file, config_flag, describe
from goodput.diagnose.classify import run_classify
from goodput.identifiers import InvalidIdentifierError, validate_cluster, validate_job_id
from goodput.models import AnomalyKind, Category, Mode
from goodput.recover.audit import parse_since
from goodput.service.incidents import ServiceError
from workers import devserver
from workers.config_command import cmd_config
from workers.doctor import run_checks
from workers.job_advice import run_advise_job
from workers.logs import configure as configure_logs
from workers.serve import cmd_agent, cmd_console, cmd_up, cmd_worker
from workers.service_commands import cmd_advise, cmd_client, show_audit

log = logging.getLogger("goodput")
# The commands that keep keys, logs or state in data_dir: refused when another user could plant them.
DATA_DIR_COMMANDS = frozenset({"up", "worker", "console", "audit"})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="goodput", description=__doc__)
    parser.add_argument("--config", type=Path, help="goodput.toml to read (default: GOODPUT_CONFIG, else "
                        "./goodput.toml when it is yours, ~/.config/goodput/goodput.toml, /etc/goodput/goodput.toml)")
    parser.add_argument("--temporal", help="Temporal HOST:PORT (default from settings: 127.0.0.1:7233)")
    parser.add_argument("--namespace", help="Temporal namespace")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run the service on the embedded Temporal dev server")
    up.add_argument("--data-dir", type=Path, help="where incidents and the fake cluster live")
    up.add_argument("--mode", choices=[m.value for m in Mode], help="override the policy mode")

    worker = sub.add_parser("worker", help="run a worker against an external Temporal")
    worker.add_argument("--task-queue")

    console = sub.add_parser("console", help="serve the Recovery Console (and /metrics) against a running goodput")
    console.add_argument("--host", help="address to bind (default 127.0.0.1)")
    console.add_argument("--port", type=int, help="port (default 8900; 0 picks a free one)")
    console.add_argument("--data-dir", type=Path, help="where the audit log and console keys live")

    inject = sub.add_parser("inject", help="submit an anomaly by hand")
    inject.add_argument("--file", type=Path, help="a JSON file holding one anomaly")
    inject.add_argument("--job", help="job id")
    inject.add_argument("--kind", default=AnomalyKind.CRASH.value, help="anomaly kind")
    inject.add_argument("--category", choices=[c.value for c in Category])
    inject.add_argument("--attempt", type=int, default=0, help="job attempt (restart count)")
    inject.add_argument("--cluster")
    inject.add_argument("--node", action="append", default=[], help="implicated node (repeatable)")
    inject.add_argument("--evidence", action="append", default=[], help="evidence line (repeatable)")
    inject.add_argument("--mode", choices=[m.value for m in Mode], help="mode for a new incident")

    incidents = sub.add_parser("incidents", help="list incidents")
    incidents.add_argument("--limit", type=int, default=50)
    incidents.add_argument("--json", action="store_true")

    doctor = sub.add_parser("doctor", help="check this host's set-up (Temporal, Slurm, rights, data dir) "
                                           "and say what to fix")
    doctor.add_argument("--json", action="store_true")
    doctor.add_argument("--kernel-log", type=Path, help="the node agent's --kernel-log, to check it is kernel-only "
                                                        "(default: agent.kernel_log)")

    faults = sub.add_parser("faults", help="one fault, many jobs: node incidents with every job they hit, and "
                                           "unlinked incidents grouped by the node they blame")
    faults.add_argument("--limit", type=int, default=2000, help="newest incidents to group")
    faults.add_argument("--cluster", help="cluster name (default from settings)")
    faults.add_argument("--window", type=float, default=10.0, help="minutes between incidents of one fault")
    faults.add_argument("--json", action="store_true")

    lost = sub.add_parser("lost-work", help="work redone after failures, per job and cluster")
    lost.add_argument("--limit", type=int, default=200, help="newest incidents to include")
    lost.add_argument("--cluster", help="only this cluster's incidents")
    lost.add_argument("--json", action="store_true")

    audit = sub.add_parser("audit", help="every action goodput took and every operator decision")
    audit.add_argument("--since", help="an age (90m, 24h, 7d) or an ISO time")
    audit.add_argument("--format", choices=["table", "jsonl", "csv"], default="table")
    audit.add_argument("--from-histories", action="store_true",
                       help="also rebuild the trail from the incidents' workflow histories (needs Temporal)")
    audit.add_argument("--limit", type=int, default=1000, help="newest incidents to rebuild from")
    audit.add_argument("--data-dir", type=Path, help="where the audit log lives (default .goodput)")

    incident = sub.add_parser("incident", help="show one incident: timeline and plan")
    incident.add_argument("incident_id")
    incident.add_argument("--json", action="store_true")

    for verb in ("approve", "cancel"):
        p = sub.add_parser(verb, help=f"{verb} a recovery")
        p.add_argument("incident_id")
        p.add_argument("--reason", required=True)
        p.add_argument("--who", default=os.environ.get("USER") or "operator")
        if verb == "cancel":  # what the rule's track record counts (goodput trust)
            p.add_argument("--reason-kind", choices=REASON_KINDS)

    trust = sub.add_parser("trust", help="each rule's track record here and the autonomy it earned; pin a rule")
    trust.add_argument("action", choices=["show", "pin"], nargs="?", default="show")
    trust.add_argument("rule", nargs="?")
    trust.add_argument("mode", nargs="?", help="with pin: monitor, approve, autonomous, or none to unpin")
    trust.add_argument("--cluster", help="cluster name (default from settings)")
    trust.add_argument("--reason", help="why (required for pin)")
    trust.add_argument("--who", default=os.environ.get("USER") or "operator")
    trust.add_argument("--json", action="store_true")

    kill = sub.add_parser("kill-switch", help="put every partition of a cluster in monitor mode at once (and back)")
    kill.add_argument("action", choices=["status", "on", "off"], nargs="?", default="status")
    kill.add_argument("--cluster", help="cluster name (default from settings)")
    kill.add_argument("--reason", help="why (required for on and off)")
    kill.add_argument("--who", default=os.environ.get("USER") or "operator")

    breaker = sub.add_parser("breaker", help="show or reset the cluster's drain breaker")
    breaker.add_argument("action", choices=["status", "reset"], nargs="?", default="status")
    breaker.add_argument("--cluster", help="cluster name (default from settings)")
    breaker.add_argument("--reason", help="why (required for reset)")
    breaker.add_argument("--who", default=os.environ.get("USER") or "operator")

    nodes = sub.add_parser("nodes", help="what unrelated incidents say about each node (the node memory)")
    nodes.add_argument("--cluster", help="cluster name (default from settings)")
    nodes.add_argument("--json", action="store_true")

    agent = sub.add_parser("agent", help="run the node agent: GPU faults and kernel Xids become incidents")
    agent.add_argument("--probe", choices=["nvml", "dcgm", "none"])
    agent.add_argument("--kernel-log", type=Path)
    agent.add_argument("--node")

    classify = sub.add_parser("classify", help="diagnose log files offline")
    classify.add_argument("--json", action="store_true")
    classify.add_argument("paths", nargs="+")

    adv = sub.add_parser("advise", help="the checkpoint interval a job should use (Young-Daly), from its "
                                        "checkpoints (ROOT), or from all goodput measured about a job (--job)")
    adv.add_argument("root", nargs="?", help="the job's checkpoint root")
    adv.add_argument("--job", help="a job id: its record, checkpoints, step time and failure rate, measured")
    adv.add_argument("--cluster", help="the job's cluster, with --job (default from settings)")
    adv.add_argument("--layout", help="auto-detected unless named")
    adv.add_argument("--step-time", type=float, help="seconds per training step (with --job: measured unless given)")
    adv.add_argument("--gpus", type=int, help="GPUs the job uses (with --job: from its nodes unless given)")
    adv.add_argument("--mtbf-hours", type=float, help="the job's mean time between failures, if known")
    adv.add_argument("--nodes", type=int, help="nodes the job uses (with --cluster-nodes: MTBF from goodput's "
                                              "incidents of the last --window)")
    adv.add_argument("--cluster-nodes", type=int, help="nodes in the cluster (with --job: from the scheduler "
                                                      "unless given)")
    adv.add_argument("--window", default="30d", help="how far back incidents count (default 30d)")
    adv.add_argument("--restart-s", type=float, default=600.0, help="time from a failure to training again")
    adv.add_argument("--json", action="store_true")

    config = sub.add_parser("config", help="show the effective settings, secrets redacted")
    config.add_argument("action", choices=["show"])
    config.add_argument("--origin", action="store_true", help="where each value came from: flag > env > file > default")

    checkpoints = sub.add_parser("checkpoints", help="which checkpoint goodput would resume from, and why")
    checkpoints.add_argument("root", help="the checkpoint root (as in goodput:ckpt=<layout>:<root>)")
    checkpoints.add_argument("--layout", help="auto-detected unless named: " + ", ".join(LAYOUTS))
    checkpoints.add_argument("--settle", type=float, default=DEFAULT_SETTLE_S,
                             help="seconds a checkpoint must be untouched to be trusted (default %(default)s)")
    checkpoints.add_argument("--json", action="store_true")
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    if args.temporal:
        overrides["temporal_address"] = args.temporal
    if args.namespace:
        overrides["namespace"] = args.namespace
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = args.data_dir
    if getattr(args, "task_queue", None):
        overrides["task_queue"] = args.task_queue
    with config_flag(args.config):
        try:
            settings = Settings(**overrides)  # type: ignore[arg-type]
        except ValidationError as err:  # its text would show the values: tokens, OAuth secrets
            raise SettingsError(describe(err, config_file())) from None
    if args.command == "console" and (args.host or args.port is not None):
        console = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
        settings = settings.model_copy(update={"console": settings.console.model_copy(update=console)})
    if getattr(args, "mode", None) and args.command == "up":
        settings = settings.model_copy(update={"policy": settings.policy.model_copy(
            update={"mode": Mode(args.mode)})})
    return settings


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    if args.kernel_log is not None:
        settings = settings.model_copy(update={"agent": settings.agent.model_copy(
            update={"kernel_log": args.kernel_log})})
    results = asyncio.run(run_checks(settings))
    if args.json:
        for result in results:
            print(result.model_dump_json())
    else:
        render_doctor(results, sys.stdout)
    return doctor_exit_code(results)


def cmd_classify(args: argparse.Namespace) -> int:
    return run_classify(args.paths, args.json, sys.stdout, sys.stderr)


async def cmd_advise_job(args: argparse.Namespace, settings: Settings) -> int:
    now = datetime.now(UTC)
    overrides = Overrides(step_time_s=args.step_time, gpus=args.gpus, mtbf_hours=args.mtbf_hours,
                          cluster_nodes=args.cluster_nodes, window=now - parse_since(args.window, now),
                          restart_s=args.restart_s)
    return await run_advise_job(settings, validate_job_id(args.job), validate_cluster(args.cluster or settings.cluster),
                                overrides, as_json=args.json, out=sys.stdout)


def cmd_checkpoints(args: argparse.Namespace) -> int:
    return run_checkpoints(os.path.abspath(args.root), args.layout, args.json, sys.stdout, sys.stderr,
                           datetime.now(UTC), settle_s=args.settle)


def dispatch(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    err = Console(stderr=True)
    configure_logs(os.environ.get("GOODPUT_LOG_FORMAT", "text"))
    try:
        return _run(args, console)
    except (ServiceError, AnomalyInputError, InvalidIdentifierError, devserver.DevServerError,
            NvmlUnavailableError) as error:
        err.print(Text("error: ", style="red") + terminal_text(str(error), keep_newlines=True), highlight=False)
        return 2
    except ValueError as error:  # settings (described without values), files refused, decisions
        err.print(Text("error: ", style="red") + terminal_text(str(error), keep_newlines=True), highlight=False)
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace, console: Console) -> int:
    """The command; the commands that need no settings (or only to read a job) run before they are read."""
    if args.command == "classify":
        return cmd_classify(args)
    if args.command == "checkpoints":
        return cmd_checkpoints(args)
    if args.command == "advise":
        done = _advise_before_settings(args)
        if done is not None:
            return done
    settings = settings_from(args)
    if args.command in DATA_DIR_COMMANDS:
        check_data_dir(settings.data_dir)
    if args.command == "audit" and not args.from_histories:
        return show_audit(args, settings)
    if args.command == "doctor":
        return cmd_doctor(args, settings)
    if args.command == "config":
        return cmd_config(args, settings)
    if args.command == "up":
        return asyncio.run(cmd_up(settings, console))
    if args.command == "worker":
        return asyncio.run(cmd_worker(settings, console))
    if args.command == "console":
        return asyncio.run(cmd_console(settings, console))
    if args.command == "agent":
        return asyncio.run(cmd_agent(args, settings))
    return asyncio.run(cmd_client(args, settings, console))


def _advise_before_settings(args: argparse.Namespace) -> int | None:
    """`goodput advise` for one job, or with the MTBF given; None when the MTBF is to be measured
    from the incidents (a service command); refused when neither can be."""
    if args.job is None and (args.root is None or args.step_time is None or args.gpus is None):
        raise AnomalyInputError("advise needs ROOT with --step-time and --gpus, or --job JOB")
    if args.job is not None:
        return asyncio.run(cmd_advise_job(args, settings_from(args)))
    if args.mtbf_hours is not None:
        return cmd_advise(args, args.mtbf_hours)
    if not (args.nodes and args.cluster_nodes):
        raise AnomalyInputError("advise needs --mtbf-hours, or --nodes and --cluster-nodes (MTBF from incidents)")
    return None


def main() -> None:
    code = dispatch()
    sys.stdout.flush()
    sys.stderr.flush()
    # Short-lived Temporal clients can abort at interpreter exit (sdk-python#300) after the call
    # succeeded; leave without running finalizers so the exit code is the command's.
    with contextlib.suppress(Exception):
        logging.shutdown()
    os._exit(code)
