"""The `goodput` command line's grammar: every command, its description, an example and help on
every argument, grouped by what operators do.

It is its own module, importing nothing but the standard library, so `goodput --help` (and a
typo answered with a usage error) costs no Temporal, pydantic or Starlette import: the commands
import what they need when they run (workers.main). docs/cli.md and the shell completion scripts
are generated from this parser, so they cannot drift from it. The choices written out here
(modes, categories, layouts) are the enums' values; tests/cli/test_cli_grammar.py holds them to
the enums.

Adding a command is one `_command(...)` call with its arguments, in the group it belongs to.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from pathlib import Path
from typing import NoReturn

PROG = "goodput"
MODES = ("monitor", "approve", "autonomous")
REASON_KINDS = ("wrong-diagnosis", "wrong-node", "not-needed", "other")
CATEGORIES = ("gpu-hardware", "nvlink", "network", "nccl-timeout", "hang", "straggler", "oom", "app-error",
              "storage", "node-failure", "scheduler-policy", "unknown")
KINDS = ("crash", "hang", "straggler", "gpu-fault", "node-failure", "oom", "storage", "job-failed", "other")
LAYOUTS = ("megatron", "deepspeed", "hf", "nemo", "lightning", "torchtitan", "dcp", "generic")
DEFAULT_SETTLE_S = 120.0
LOG_LEVELS = ("debug", "info", "warning", "error")
GROUPS = ("incidents", "nodes", "jobs", "policy", "service", "offline tools")
SHELLS = ("bash", "zsh", "fish")

EXIT_CODES = (
    (0, "ok"),
    (1, "findings: the command worked and found problems (doctor, a checkpoint root with nothing to resume)"),
    (2, "usage: a bad flag or value, or an id that names nothing"),
    (3, "unavailable: Temporal, Slurm or the GPU library cannot be reached"),
    (4, "refused: the service refused the request (e.g. a decision on an incident that is not waiting for it)"),
    (70, "internal: goodput failed (a bug); rerun with --log-level debug for the traceback"),
    (130, "interrupted (Ctrl-C)"),
)
JSON_CONTRACT = ("--json prints one JSON object for one thing (an incident, a summary, an advice) and "
                 "JSON Lines (one object a line) for lists (incidents, faults, nodes, audit records, "
                 "doctor checks, classified files).")
TIME_SYNTAX = "Times are written one way: an age (30s, 90m, 24h, 7d) or, for a point in time, an ISO 8601 time."


class Parser(argparse.ArgumentParser):
    """Usage errors are one line on stderr and exit 2, never the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _who() -> str:
    return os.environ.get("USER") or "operator"


def _common(top: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes, before or after its name (`goodput worker --temporal H:P`)."""
    default = argparse.SUPPRESS if suppress else None
    parser = top.add_argument_group("global options (before or after the command)") if suppress else top
    parser.add_argument("--config", type=Path, default=default, metavar="FILE",
                        help="goodput.toml to read (default: GOODPUT_CONFIG, else ./goodput.toml when it is yours, "
                             "~/.config/goodput/goodput.toml, /etc/goodput/goodput.toml)")
    parser.add_argument("--temporal", default=default, metavar="HOST:PORT",
                        help="Temporal frontend (default from settings: 127.0.0.1:7233)")
    parser.add_argument("--namespace", default=default, help="Temporal namespace (default from settings)")
    parser.add_argument("--log-level", default=default, choices=LOG_LEVELS,
                        help="log messages at this level and above on stderr (default info)")


def _duration(text: str) -> str:
    """An age (90m, 24h, 7d); checked here so a typo is a usage error, kept as text for the command."""
    body, unit = text.strip()[:-1], text.strip()[-1:]
    if unit in "smhd" and body.isascii() and body.isdigit() and 0 < len(body) < 10:
        return text.strip()
    raise argparse.ArgumentTypeError(f"{text[:40]!r}: give an age like 90m, 24h or 7d")


def _gap(text: str) -> str:
    """`faults --window`: an age, or a bare number of minutes as it used to be."""
    try:
        minutes = float(text)
    except ValueError:
        return _duration(text)
    if not 0 < minutes < 1e6:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: give an age like 10m")
    return f"{round(minutes * 60)}s"


class _Commands:
    """Registers commands with their group, so the top-level help lists them by what operators do."""

    def __init__(self, sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
        self.sub, self.common = sub, common
        self.listed: list[tuple[str, str, str]] = []

    def __call__(self, name: str, group: str, summary: str, description: str, example: str) -> Parser:
        assert group in GROUPS, group
        self.listed.append((group, name, summary))
        return self.sub.add_parser(name, parents=[self.common],
                                   description=f"{summary}.\n\n{textwrap.fill(description, 100)}",
                                   epilog="example:\n  " + example.replace("\n", "\n  "),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)

    def overview(self) -> str:
        width = max(len(name) for _, name, _ in self.listed) + 2
        lines = []
        for group in GROUPS:
            lines.append(f"  {group}:")
            lines += [f"    {name.ljust(width)}{summary}" for g, name, summary in self.listed if g == group]
        return "\n".join(lines)


def build_parser() -> Parser:
    parser = Parser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
                    description="goodput keeps distributed training running: detect, attribute, isolate, resume, "
                                "verify.")
    _common(parser, suppress=False)
    parser.add_argument("--version", action="store_true",
                        help="print goodput's version (and git commit, Temporal and Slurm versions when reachable)")
    common = Parser(add_help=False)
    _common(common, suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser,
                                help="one of the commands below")
    command = _Commands(sub, common)
    _incidents(command)
    _nodes_and_policy(command)
    _jobs(command)
    _service(command)
    _offline(command)
    parser.epilog = (f"commands:\n{command.overview()}\n\n{textwrap.fill(JSON_CONTRACT, 100)}\n"
                     f"{textwrap.fill(TIME_SYNTAX, 100)}\n\nexit codes:\n"
                     + "\n".join(f"  {code:<4}{meaning}" for code, meaning in EXIT_CODES)
                     + f"\n\n`{PROG} COMMAND --help` says what a command does, with an example.")
    return parser


def _json(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} (see the JSON contract in `goodput --help`)")


def _dry_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="print what would be done and change nothing")


def _decided(p: argparse.ArgumentParser, reason: str) -> None:
    p.add_argument("--reason", required=reason == "required", help=f"why ({reason}; kept in the audit trail)")
    p.add_argument("--who", default=_who(), help="who decides, for the audit trail (default: $USER)")


def _cluster(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", help="cluster name (default from settings)")


def _incidents(command: _Commands) -> None:
    p = command("incidents", "incidents", "list the newest incidents",
                "One row per incident: job, state, mode, category, culprit nodes, start time.",
                "goodput incidents --limit 20")
    p.add_argument("--limit", type=int, default=50, help="how many of the newest incidents (default 50)")
    _json(p, "one JSON object a line, one per incident")

    p = command("incident", "incidents", "show one incident: timeline and plan",
                "Its attribution, the plan (or recommendation) with its rationale, the timeline, the first "
                "evidence lines and any step Temporal is retrying.", "goodput incident inc-1001-0-3f2a")
    p.add_argument("incident_id", help="the incident's id (from `goodput incidents`)")
    _json(p, "the incident's report as one JSON object")

    p = command("inject", "incidents", "submit an anomaly by hand",
                "Opens an incident for the job attempt (or adds to the open one), as a detector would.",
                "goodput inject --job 1001 --kind gpu-fault --node node2 --evidence 'NVRM: Xid 79'")
    p.add_argument("--file", type=Path, help="a JSON file holding one anomaly (instead of the flags)")
    p.add_argument("--job", help="the job id")
    p.add_argument("--kind", default="crash", choices=KINDS, help="what was seen (default crash)")
    p.add_argument("--category", choices=CATEGORIES, help="the failure category, when known")
    p.add_argument("--attempt", type=int, default=0, help="the job attempt (restart count; default 0)")
    _cluster(p)
    p.add_argument("--node", action="append", default=[], help="an implicated node (repeatable)")
    p.add_argument("--evidence", action="append", default=[], help="an evidence line (repeatable)")
    p.add_argument("--mode", choices=MODES,
                   help="ask for a stricter mode than the service's for this partition (never looser; "
                        "default: the service's)")
    _dry_run(p)

    for verb, what in (("approve", "let goodput carry out the plan of an incident awaiting approval"),
                       ("cancel", "stop an incident's recovery; goodput takes no further action on it")):
        p = command(verb, "incidents", f"{verb} a recovery", f"{what[0].upper()}{what[1:]}. The decision, "
                    "with who and why, is in the audit trail.",
                    f"goodput {verb} inc-1001-0-3f2a --reason 'xid 79 confirmed by on-call'")
        p.add_argument("incident_id", help="the incident's id (from `goodput incidents`)")
        _decided(p, "required")
        _dry_run(p)
        if verb == "cancel":
            p.add_argument("--reason-kind", choices=REASON_KINDS,
                           help="what was wrong, for the rule's track record (`goodput trust`)")

    p = command("audit", "incidents", "every action goodput took and every operator decision",
                "Read from <data_dir>/audit.jsonl, so it works while Temporal is down; --from-histories also "
                "rebuilds the trail from the incidents' workflow histories and merges the two.",
                "goodput audit --since 24h --json")
    p.add_argument("--since", type=_since, help="only records from this age (90m, 24h, 7d) or ISO time on")
    _json(p, "one JSON object a line, one per record")
    p.add_argument("--csv", action="store_const", dest="format", const="csv", help="print CSV")
    p.add_argument("--format", choices=["table", "jsonl", "csv"], default="table", help=argparse.SUPPRESS)
    p.add_argument("--from-histories", action="store_true",
                   help="also rebuild the trail from the incidents' workflow histories (needs Temporal)")
    p.add_argument("--limit", type=int, default=1000, help="newest incidents to rebuild from (default 1000)")
    p.add_argument("--data-dir", type=Path, help="where the audit log lives (default from settings: .goodput)")

    p = command("faults", "incidents", "one fault, many jobs",
                "Node incidents with every job they hit, and unlinked incidents grouped by the node they blame.",
                "goodput faults --window 10m --json")
    p.add_argument("--limit", type=int, default=2000, help="newest incidents to group (default 2000)")
    _cluster(p)
    p.add_argument("--window", type=_gap, default="10m",
                   help="the most time between two incidents of one fault (default 10m)")
    _json(p, "one JSON object a line, one per fault")


def _since(text: str) -> str:
    """An age or an ISO time; the command resolves it against the clock."""
    from datetime import datetime  # stdlib, light: only when --since is given

    try:
        datetime.fromisoformat(text.strip())
    except ValueError:
        return _duration(text)
    return text.strip()


def _nodes_and_policy(command: _Commands) -> None:
    p = command("nodes", "nodes", "what unrelated incidents say about each node; return one to service now",
                "The node memory: a decayed score per node from incidents of unrelated jobs, and the nodes on "
                "their way back to service. `return NODE` ends a quarantined node's wait: its health check runs "
                "now, and only a pass puts it back (audited).",
                "goodput nodes return gpu-017 --reason 'PSU replaced, ticket 4711'")
    p.add_argument("action", choices=["show", "return"], nargs="?", default="show",
                   help="show the nodes (default) or return one to service now")
    p.add_argument("node", nargs="?", help="with return: the node, as Slurm names it")
    _cluster(p)
    _decided(p, "required for return")
    _dry_run(p)
    _json(p, "one JSON object a line, one per node")

    p = command("agent", "nodes", "run the node agent",
                "Runs on each GPU node: GPU faults (NVML or DCGM) and kernel Xids become incidents.",
                "goodput agent --probe nvml --kernel-log /var/log/kern.log")
    p.add_argument("--probe", choices=["nvml", "dcgm", "none"], help="how to watch the GPUs (default from settings)")
    p.add_argument("--kernel-log", type=Path, help="a kernel-only log to follow for Xids (default from settings)")
    p.add_argument("--node", help="this node's name as the scheduler knows it (default: the host name)")

    p = command("stacks", "nodes", "dump the stacks of a hung job's processes on this node",
                "On a node of the job: every process `scontrol listpids` lists for it, dumped by py-spy when "
                "installed, else sent the signal the job's comment names (goodput:stack-signal=USR1) where the "
                "process catches it, i.e. registered faulthandler for it (the dump goes to the job's stderr, "
                "where goodput reads it); any other process is skipped, never signalled.",
                "goodput stacks --job 4242")
    p.add_argument("--job", required=True, help="the Slurm job id")
    p.add_argument("--node", help="this node's name as Slurm knows it, where several slurmd share the host "
                   "(Slurm's multiple-slurmd setups); default: let scontrol ask the host's slurmd")

    p = command("agent-token", "nodes", "print one node's heartbeat token",
                "The token a node's agent sends with its heartbeats (agent.heartbeat_token_file), derived from "
                "liveness.secret_file: it speaks for that node only.", "goodput agent-token --node gpu-017")
    p.add_argument("--node", required=True, help="the node's name as the scheduler knows it")

    p = command("trust", "policy", "each rule's track record here and the autonomy it earned; pin a rule",
                "Per rule: recommendations, agreed, disagreed, false drains, and whether it may act alone in an "
                "autonomous partition, with why; `pin` overrides what the record earned (audited).",
                "goodput trust pin xid-79 approve --reason 'new driver, watch it first'")
    p.add_argument("action", choices=["show", "pin"], nargs="?", default="show", help="show the records (default) "
                   "or pin a rule")
    p.add_argument("rule", nargs="?", help="with pin: the rule (signature id, as `goodput trust` lists it)")
    p.add_argument("mode", nargs="?", help="with pin: monitor, approve, autonomous, or none to unpin")
    _cluster(p)
    _decided(p, "required for pin")
    _json(p, "one JSON object a line, one per rule")

    p = command("kill-switch", "policy", "put every partition of a cluster in monitor mode at once (and back)",
                "`on` stops goodput acting anywhere in the cluster (it still detects and recommends); "
                "`off` returns each partition to its mode.",
                "goodput kill-switch on --reason 'reviewing last night's drains'")
    p.add_argument("action", choices=["status", "on", "off"], nargs="?", default="status",
                   help="show it (default), engage it or release it")
    _cluster(p)
    _decided(p, "required for on and off")
    _dry_run(p)

    p = command("breaker", "policy", "show or reset the cluster's drain breaker",
                "The breaker opens when goodput drained too many nodes in its window; reset closes it again.",
                "goodput breaker reset --reason 'switch replaced'")
    p.add_argument("action", choices=["status", "reset"], nargs="?", default="status",
                   help="show it (default) or reset it")
    _cluster(p)
    _decided(p, "required for reset")
    _dry_run(p)


def _jobs(command: _Commands) -> None:
    p = command("lost-work", "jobs", "work redone after failures, per job and cluster",
                "Iterations, hours and GPU-hours between each incident's resume checkpoint and the progress lost.",
                "goodput lost-work --cluster prod --json")
    p.add_argument("--limit", type=int, default=200, help="newest incidents to include (default 200)")
    p.add_argument("--cluster", help="only this cluster's incidents")
    _json(p, "the summary as one JSON object")

    p = command("advise", "jobs", "the checkpoint interval a job should use (Young-Daly)",
                "From the job's checkpoints (ROOT with --step-time and --gpus), or from all goodput measured "
                "about a job (--job). The MTBF is --mtbf-hours, or measured from goodput's incidents.",
                "goodput advise /ckpt/run7 --step-time 4.0 --gpus 256 --mtbf-hours 8\ngoodput advise --job 1001")
    p.add_argument("root", nargs="?", help="the job's checkpoint root")
    p.add_argument("--job", help="a job id: its record, checkpoints, step time and failure rate, measured")
    p.add_argument("--cluster", help="the job's cluster, with --job (default from settings)")
    p.add_argument("--layout", choices=LAYOUTS, help="the checkpoint layout (auto-detected unless named)")
    p.add_argument("--step-time", type=float, help="seconds per training step (with --job: measured unless given)")
    p.add_argument("--gpus", type=int, help="GPUs the job uses (with --job: from its nodes unless given)")
    p.add_argument("--mtbf-hours", type=float, help="the job's mean time between failures, if known")
    p.add_argument("--nodes", type=int, help="nodes the job uses (with --cluster-nodes: MTBF from goodput's "
                                             "incidents since --since)")
    p.add_argument("--cluster-nodes", type=int, help="nodes in the cluster (with --job: from the scheduler "
                                                     "unless given)")
    p.add_argument("--since", "--window", dest="since", type=_duration, default="30d",
                   help="how far back incidents count (default 30d)")
    p.add_argument("--restart-s", type=float, default=600.0,
                   help="seconds from a failure to training again (default 600)")
    _json(p, "the advice as one JSON object")

    p = command("checkpoints", "jobs", "which checkpoint goodput would resume from, and why",
                "Every candidate, newest first, with its problems; exits 1 when none can be resumed from.",
                "goodput checkpoints /ckpt/run7 --layout megatron")
    p.add_argument("root", help="the checkpoint root (as in goodput:ckpt=<layout>:<root>)")
    p.add_argument("--layout", choices=LAYOUTS, help="the checkpoint layout (auto-detected unless named)")
    p.add_argument("--settle", type=float, default=DEFAULT_SETTLE_S,
                   help="seconds a checkpoint must be untouched to be trusted (default %(default)s)")
    _json(p, "the report as one JSON object")


def _service(command: _Commands) -> None:
    p = command("up", "service", "run the service on the embedded Temporal dev server",
                "Dev server, worker and Recovery Console in one process, on a demo cluster unless settings name "
                "a scheduler; state under the data dir survives restarts. Ctrl-C stops it.",
                "goodput up --mode approve")
    p.add_argument("--data-dir", type=Path, help="where incidents, keys and the fake cluster live (default .goodput)")
    p.add_argument("--mode", choices=MODES, help="the policy mode for every partition (default from settings)")

    p = command("worker", "service", "run a worker against an external Temporal",
                "The production process: runs the workflows and activities on the task queue.",
                "goodput worker --temporal temporal.example:7233 --namespace goodput")
    p.add_argument("--task-queue", help="the task queue to poll (default from settings)")

    p = command("console", "service", "serve the Recovery Console (and /metrics) against a running goodput",
                "The web console: incidents live, approvals, kill switch, nodes, jobs.",
                "goodput console --host 0.0.0.0 --port 8900")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8900; 0 picks a free one)")
    p.add_argument("--data-dir", type=Path, help="where the audit log and console keys live (default .goodput)")

    p = command("doctor", "service", "check this host's set-up and say what to fix",
                "Temporal, search attributes, Slurm, rights, data dir, kernel log: one line each, with the fix "
                "for what is broken; exits 1 when something is.", "goodput doctor")
    _json(p, "one JSON object a line, one per check")
    p.add_argument("--kernel-log", type=Path, help="the node agent's --kernel-log, to check it is kernel-only "
                                        "(default from settings: agent.kernel_log)")

    p = command("config", "service", "show the settings in effect, secrets redacted",
                "Every setting after flags, environment, file and defaults are applied (in that order of "
                "precedence); with --origin, where each value came from.", "goodput config show --origin")
    p.add_argument("action", choices=["show"], help="what to do with the settings (show them)")
    p.add_argument("--origin", action="store_true",
                   help="where each value came from: flag > env > file > default")


def _offline(command: _Commands) -> None:
    p = command("classify", "offline tools", "diagnose log files offline",
                "What failed and why, from job logs alone: no service, no Temporal.",
                "goodput classify slurm-1001.out")
    p.add_argument("paths", nargs="+", help="log files to classify")
    _json(p, "one JSON object a line, one per file")

    p = command("completion", "offline tools", "print a shell completion script",
                "Load it in your shell's start-up file.",
                'eval "$(goodput completion bash)"      # ~/.bashrc\n'
                'goodput completion fish > ~/.config/fish/completions/goodput.fish')
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
