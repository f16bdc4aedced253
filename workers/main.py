"""`goodput` console script: the composition root that wires the pure CLI to Temporal.

The grammar is workers.cli_parser's (standard library only); each command imports what it needs
when it runs, so `--help`, completion and usage errors never pay for Temporal, pydantic or
Starlette. Errors become one line on stderr and a documented exit code (workers.cli_parser's
EXIT_CODES): 2 usage, 3 unavailable, 4 refused, 70 a crash.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from workers.cli_parser import build_parser

if TYPE_CHECKING:
    from goodput.config import Settings

__all__ = ["build_parser", "dispatch", "main", "settings_from"]

log = logging.getLogger("goodput")
# The commands that keep keys, logs or state in data_dir: refused when another user could plant them.
DATA_DIR_COMMANDS = frozenset({"up", "worker", "console", "audit"})
EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_REFUSED, EXIT_INTERNAL = 2, 3, 4, 70


def settings_from(args: argparse.Namespace) -> Settings:
    from pydantic import ValidationError

    from goodput.config import Settings
    from goodput.config_sources import SettingsError, config_file, config_flag, describe

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
        from goodput.models import Mode

        settings = settings.model_copy(update={"policy": settings.policy.model_copy(
            update={"mode": Mode(args.mode)})})
    return settings


def exit_code(error: BaseException) -> int:
    """The documented exit code for an error a command raised."""
    from activities.adapters.gpu_nvml import NvmlUnavailableError
    from goodput.service.incidents import DecisionRejectedError, ServiceError, ServiceUnavailableError
    from workers.devserver import DevServerError

    if isinstance(error, ServiceUnavailableError | DevServerError | NvmlUnavailableError):
        return EXIT_UNAVAILABLE
    if isinstance(error, DecisionRejectedError):
        return EXIT_REFUSED
    # The rest an operator can act on: settings (described without values), ids and input refused,
    # an incident that does not exist.
    if isinstance(error, ServiceError | ValueError):
        return EXIT_USAGE
    return EXIT_INTERNAL


def report_error(message: str) -> None:
    """One line on stderr, whatever the message holds; coloured only on a terminal, never wrapped."""
    from goodput.cli.terminal import error_line

    tty = sys.stderr.isatty()
    sys.stderr.write(("\x1b[31merror:\x1b[0m " if tty else "error: ") + error_line(message) + "\n")


def dispatch(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from workers.logs import configure as configure_logs

    level = getattr(logging, (args.log_level or "info").upper())
    configure_logs(os.environ.get("GOODPUT_LOG_FORMAT", "text"), level)
    if args.version:
        return _version(args)
    if args.command is None:
        parser.error("name a command")
    try:
        return _run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        code = exit_code(error)
        if code == EXIT_INTERNAL:
            log.debug("goodput %s failed", args.command, exc_info=True)
            report_error(f"internal error in goodput {args.command}: {type(error).__name__}: {error} "
                         "(a bug; rerun with --log-level debug for the traceback)")
        else:
            report_error(str(error))
        return code


def _version(args: argparse.Namespace) -> int:
    from workers.version import report

    try:
        settings: Settings | None = settings_from(args)
    except Exception:
        settings = None
    sys.stdout.write(report(settings))
    return 0


def _run(args: argparse.Namespace) -> int:
    """The command; the commands that need no settings (or only to read a job) run before they are read."""
    if args.command in OFFLINE:
        return OFFLINE[args.command](args)
    if args.command == "advise":
        done = _advise_before_settings(args)
        if done is not None:
            return done
    settings = settings_from(args)
    if args.command in DATA_DIR_COMMANDS:
        from goodput.config_sources import check_data_dir

        check_data_dir(settings.data_dir)
    if args.command == "doctor":
        return _doctor(args, settings)
    if args.command == "config":
        from workers.config_command import cmd_config

        return cmd_config(args, settings)
    if args.command == "agent-token":
        from goodput.detect.node_liveness import heartbeat_token
        from goodput.identifiers import validate_cluster, validate_node_name
        from workers.liveness import read_secret

        print(heartbeat_token(read_secret(settings.liveness.secret_file), validate_cluster(settings.cluster),
                              validate_node_name(args.node)))
        return 0
    if args.command == "audit" and not args.from_histories:
        from workers.service_commands import show_audit

        return show_audit(args, settings)
    import asyncio

    from rich.console import Console

    if args.command in ("up", "worker", "console", "agent"):
        from workers import serve

        console = Console()
        if args.command == "agent":
            return asyncio.run(serve.cmd_agent(args, settings))
        run = {"up": serve.cmd_up, "worker": serve.cmd_worker, "console": serve.cmd_console}[args.command]
        return asyncio.run(run(settings, console))
    from workers.service_commands import cmd_client

    return asyncio.run(cmd_client(args, settings, Console()))


def _classify(args: argparse.Namespace) -> int:
    from goodput.diagnose.classify import run_classify

    return run_classify(args.paths, args.json, sys.stdout, sys.stderr)


def _checkpoints(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from goodput.checkpoints import LocalFileSystem
    from goodput.checkpoints.report import run_checkpoints
    from workers.progress import CountingFileSystem, entries_read

    with entries_read(f"reading the checkpoints under {args.root}") as seen:
        return run_checkpoints(os.path.abspath(args.root), args.layout, args.json, sys.stdout, sys.stderr,
                               datetime.now(UTC), settle_s=args.settle,
                               fs=None if seen is None else CountingFileSystem(LocalFileSystem(), seen))


def _completion(args: argparse.Namespace) -> int:
    from goodput.cli.grammar import SCRIPTS

    sys.stdout.write(SCRIPTS[args.shell](build_parser()))
    return 0


def _stacks(args: argparse.Namespace) -> int:
    """Needs no settings: Slurm's list of the job's processes on this node, and /proc."""
    import shutil

    from activities.adapters.stack_dump import StackDumper
    from goodput.identifiers import validate_job_id, validate_node_name

    node = validate_node_name(args.node) if args.node else None
    report = StackDumper(py_spy=shutil.which("py-spy"), node=node).capture(validate_job_id(args.job))
    for pid, dump in report.dumps.items():
        print(f"== pid {pid} (py-spy)\n{dump.rstrip()}")
    for pid in report.signalled:
        print(f"== pid {pid}: {report.signal_name} sent; its faulthandler writes the dump to the job's stderr")
    for skipped in report.skipped:
        print(f"== pid {skipped.pid}: skipped, {skipped.reason}")
    if report.error:
        print(f"goodput stacks: {report.error}", file=sys.stderr)
    return 1 if report.error else 0


OFFLINE = {"classify": _classify, "checkpoints": _checkpoints, "completion": _completion, "stacks": _stacks}


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from goodput.cli.doctor import exit_code as doctor_exit_code
    from goodput.cli.doctor import render as render_doctor
    from workers.doctor import run_checks
    from workers.progress import spinner

    if args.kernel_log is not None:
        settings = settings.model_copy(update={"agent": settings.agent.model_copy(
            update={"kernel_log": args.kernel_log})})
    with spinner("checking Temporal, Slurm, rights and the data dir"):
        results = asyncio.run(run_checks(settings))
    if args.json:
        for result in results:
            print(result.model_dump_json())
    else:
        render_doctor(results, sys.stdout)
    return doctor_exit_code(results)


def _advise_before_settings(args: argparse.Namespace) -> int | None:
    """`goodput advise` for one job, or with the MTBF given; None when the MTBF is to be measured
    from the incidents (a service command); refused when neither can be."""
    from goodput.cli.anomaly_input import AnomalyInputError

    if args.job is None and (args.root is None or args.step_time is None or args.gpus is None):
        raise AnomalyInputError("advise needs ROOT with --step-time and --gpus, or --job JOB")
    if args.job is not None:
        return _advise_job(args, settings_from(args))
    if args.mtbf_hours is not None:
        from workers.service_commands import cmd_advise

        return cmd_advise(args, args.mtbf_hours)
    if not (args.nodes and args.cluster_nodes):
        raise AnomalyInputError("advise needs --mtbf-hours, or --nodes and --cluster-nodes (MTBF from incidents)")
    return None


def _advise_job(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio
    from datetime import UTC, datetime

    from goodput.checkpoints.job_advice import Overrides
    from goodput.identifiers import validate_cluster, validate_job_id
    from goodput.recover.audit import parse_since
    from workers.job_advice import run_advise_job

    now = datetime.now(UTC)
    overrides = Overrides(step_time_s=args.step_time, gpus=args.gpus, mtbf_hours=args.mtbf_hours,
                          cluster_nodes=args.cluster_nodes, window=now - parse_since(args.since, now),
                          restart_s=args.restart_s)
    return asyncio.run(run_advise_job(settings, validate_job_id(args.job),
                                      validate_cluster(args.cluster or settings.cluster), overrides,
                                      as_json=args.json, out=sys.stdout))


def main() -> None:
    code = dispatch()
    sys.stdout.flush()
    sys.stderr.flush()
    # Short-lived Temporal clients can abort at interpreter exit (sdk-python#300) after the call
    # succeeded; leave without running finalizers so the exit code is the command's.
    with contextlib.suppress(Exception):
        logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    main()
