"""The operator commands that talk to a running goodput through the incident service.

`goodput inject`, `incidents`, `incident`, `faults`, `nodes`, `lost-work`, `audit --from-histories`,
`advise --nodes`, `kill-switch`, `breaker` and the decisions (approve, cancel): each one a
function of the parsed arguments and a connected `TemporalIncidentService`, looked up by command
name, so `workers.main` only parses, picks and reports errors.

`--json` is one JSON object for one thing and JSON Lines for lists. `--dry-run` reads what the
change would act on (the incident, the switch, the breaker) and prints the change without making it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from rich.console import Console

from activities.adapters.audit import JsonlAuditLog
from goodput.checkpoints import IncidentLoss, summarize_lost_work
from goodput.checkpoints.advice import node_failure_rate_per_hour
from goodput.cli.advise import run_advise
from goodput.cli.anomaly_input import AnomalyInputError, from_flags, from_json_file
from goodput.cli.audit import render as render_audit
from goodput.cli.render import faults_table, incident_detail, incidents_table, lost_work_table, nodes_table
from goodput.cli.terminal import error_line, terminal_text
from goodput.cli.trust import pin_target, reason_with_kind, trust_json, trust_table
from goodput.config import Settings
from goodput.identifiers import validate_cluster
from goodput.models import Anomaly, Mode, OperatorDecision
from goodput.recover.audit import AuditRecord, merged, parse_since, since
from goodput.recover.breaker import BreakerState
from goodput.recover.incident import Decision, DecisionVerb, IncidentReport
from goodput.recover.kill_switch import KillSwitchState
from goodput.service.faults import all_faults
from goodput.service.incidents import ServiceError
from workers.client import TemporalIncidentService, connect_from
from workers.progress import counted

READS_AT_ONCE = 16

CLI_ORIGIN = f"cli on {socket.gethostname()}"[:200]


async def cmd_client(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    """Run the service command `args.command` names; any other is a decision on an incident."""
    if args.command == "inject":  # the anomaly is checked before anything is connected to
        return await _inject(args, settings, console)
    service = TemporalIncidentService(await connect_from(settings),
                                      settings.task_queue)
    return await COMMANDS.get(args.command, _decide)(args, settings, console, service)


def _anomaly(args: argparse.Namespace, settings: Settings) -> Anomaly:
    now = datetime.now(UTC)
    if args.file:
        anomaly = from_json_file(args.file, now)
    elif args.job:
        anomaly = from_flags(job_id=args.job, kind=args.kind, cluster=args.cluster or settings.cluster,
                             attempt=args.attempt, nodes=args.node, evidence=args.evidence,
                             category=args.category, now=now)
    else:
        raise AnomalyInputError("inject needs --job (with flags) or --file")
    return anomaly


async def _inject(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    """Open an incident (or add to one) from an anomaly given by flags or a JSON file; with
    --dry-run, print the anomaly that would be submitted and connect to nothing."""
    anomaly = _anomaly(args, settings)
    if args.dry_run:
        mode = (f"in the service's mode, or {args.mode} if that is stricter" if args.mode
                else "in the service's mode")
        print(f"would submit anomaly {anomaly.id} for job {anomaly.cluster}/{anomaly.job_id} attempt "
              f"{anomaly.job_attempt}, opening an incident {mode} or adding to the open one:")
        print(anomaly.model_dump_json())
        return 0
    service = TemporalIncidentService(await connect_from(settings), settings.task_queue)
    # The service's policy governs (None), not this CLI's settings; --mode may only make it stricter.
    result = await service.inject(anomaly, None, Mode(args.mode) if args.mode else None)
    verb = "opened" if result.new_incident else "added to"
    console.print(f"anomaly {anomaly.id} {verb} incident {result.incident_id}"
                  + (f" ({result.note})" if result.note else ""))
    return 0


async def _incidents(args: argparse.Namespace, settings: Settings, console: Console,
                     service: TemporalIncidentService) -> int:
    """The newest incidents, as a table or one JSON object a line."""
    rows = await service.list_incidents(limit=args.limit)
    if args.json:
        for row in rows:
            print(row.model_dump_json())
    else:
        console.print(incidents_table(rows) if rows else "no incidents yet")
    return 0


async def _advise(args: argparse.Namespace, settings: Settings, console: Console,
                  service: TemporalIncidentService) -> int:
    """The checkpoint interval advice with the MTBF measured from the node faults goodput recorded."""
    now = datetime.now(UTC)
    window = now - parse_since(args.since, now)
    rate = node_failure_rate_per_hour(await service.list_incidents(limit=10_000), args.cluster_nodes, now,
                                      window)
    if rate <= 0:
        raise AnomalyInputError(f"no node failure in the last {args.since}: give --mtbf-hours")
    return cmd_advise(args, 1 / (rate * args.nodes))


async def _faults(args: argparse.Namespace, settings: Settings, console: Console,
                  service: TemporalIncidentService) -> int:
    """The node faults of a cluster: its node incidents and the incidents grouped by the node they blame."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    now = datetime.now(UTC)
    found = all_faults(await service.node_incidents(cluster), await service.list_incidents(
        limit=args.limit, cluster=cluster), now - parse_since(args.window, now))
    if args.json:
        for fault in found:
            print(json.dumps({**fault.model_dump(mode="json", exclude={"incidents"}), "jobs": fault.jobs,
                              "incidents": [s.incident_id for s in fault.incidents]}))
    else:
        console.print(faults_table(found) if found else "no incident blamed a node")
    return 0


async def _lost_work(args: argparse.Namespace, settings: Settings, console: Console,
                     service: TemporalIncidentService) -> int:
    """The work lost to incidents, summed; reports that cannot be read are named on stderr."""
    reports, unreadable = await readable_reports(service, args.limit, args.cluster)
    summary = summarize_lost_work([IncidentLoss(cluster=r.key.cluster, job_id=r.key.job_id,
                                                incident_id=r.incident_id, lost=r.lost_work)
                                   for r in reports if r.lost_work is not None])
    if args.json:
        print(summary.model_dump_json())
    else:
        console.print(lost_work_table(summary))
    for line in unreadable:
        warn(f"skipped {line}")
    return 0


async def _audit(args: argparse.Namespace, settings: Settings, console: Console,
                 service: TemporalIncidentService) -> int:
    """The audit trail rebuilt from the incidents' histories, merged with the log on disk."""
    reports, unreadable = await readable_reports(service, args.limit)
    for line in unreadable:
        warn(f"skipped {line}")
    show_audit(args, settings, [record for r in reports for record in r.audit])
    return 0


async def _incident(args: argparse.Namespace, settings: Settings, console: Console,
                    service: TemporalIncidentService) -> int:
    """One incident's report."""
    report = await service.get(args.incident_id)
    if args.json:
        print(report.model_dump_json())
    else:
        console.print(incident_detail(report))
    return 0


async def _nodes(args: argparse.Namespace, settings: Settings, console: Console,
                 service: TemporalIncidentService) -> int:
    """Each node's standing and the nodes on their way back to service; or return one now."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    if args.action == "return":
        return await _return_node(args, cluster, console, service)
    standings = await service.node_standing(cluster)
    if args.json:
        for standing in standings:
            print(standing.model_dump_json())
    else:
        returns = await service.node_health(cluster)
        console.print(nodes_table(cluster, standings))
        for h in returns:
            console.print(terminal_text(f"return to service: {h.node} {h.phase} (incident {h.incident_id}): "
                                        f"{h.why}"), highlight=False)
    return 0


async def _return_node(args: argparse.Namespace, cluster: str, console: Console,
                       service: TemporalIncidentService) -> int:
    if not args.node or not args.reason:
        raise AnomalyInputError("nodes return needs the node and --reason")
    if args.dry_run:
        now = [h for h in await service.node_health(cluster) if h.node == args.node]
        where = f"now {now[0].phase}: {now[0].why}" if now else "goodput is not returning it to service"
        console.print(terminal_text(f"would end the quarantine of {args.node} on {cluster} as {args.who} "
                                    f"({args.reason}); {where}"), highlight=False)
        return 0
    answer = await service.request_node_return(
        cluster, args.node, OperatorDecision(who=args.who, reason=args.reason, origin=CLI_ORIGIN))
    console.print(terminal_text(answer), highlight=False)
    return 0


async def _kill_switch(args: argparse.Namespace, settings: Settings, console: Console,
                       service: TemporalIncidentService) -> int:
    """Show, engage or release a cluster's kill switch."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    if args.action != "status" and not args.reason:
        raise AnomalyInputError(f"kill-switch {args.action} needs --reason")
    by = OperatorDecision(who=args.who, reason=args.reason, origin=CLI_ORIGIN) if args.action != "status" else None
    if by is not None and args.dry_run:
        now = await service.kill_switch(cluster)
        verb = "engage" if args.action == "on" else "release"
        console.print(terminal_text(f"would {verb} the kill switch of {cluster} as {args.who} ({args.reason}); "
                                    f"now: {kill_switch_line(now)}"), highlight=False)
        return 0
    switch = await service.kill_switch(cluster, None if by is None else args.action == "on", by)
    console.print(terminal_text(f"kill switch of {cluster}: {kill_switch_line(switch)}"), highlight=False)
    return 0


async def _trust(args: argparse.Namespace, settings: Settings, console: Console,
                 service: TemporalIncidentService) -> int:
    """Each rule's track record and autonomy; or pin a rule (goodput.cli.trust)."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    bar = settings.policy.autonomy
    if args.action == "pin":
        rule, mode = pin_target(args.rule, args.mode, args.reason)
        by = OperatorDecision(who=args.who, reason=args.reason, origin=CLI_ORIGIN)
        now = await service.trust_pin(cluster, rule, mode, by, bar)
        console.print(terminal_text(f"rule {rule} on {cluster}: {now.level} ({now.why})"), highlight=False)
        return 0
    summaries = await service.trust(cluster)
    if args.json:
        if summaries:
            print(trust_json(summaries))
    else:
        console.print(trust_table(cluster, summaries))
    return 0


async def _breaker(args: argparse.Namespace, settings: Settings, console: Console,
                   service: TemporalIncidentService) -> int:
    """Show or reset a cluster's drain breaker."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    if args.action == "reset":
        if not args.reason:
            raise AnomalyInputError("breaker reset needs --reason")
        if args.dry_run:
            console.print(terminal_text(f"would reset the drain breaker of {cluster} as {args.who} ({args.reason}); "
                                        f"now: {breaker_line(await service.breaker_status(cluster))}"),
                          highlight=False)
            return 0
        await service.breaker_reset(cluster, OperatorDecision(who=args.who, reason=args.reason, origin=CLI_ORIGIN))
        console.print(terminal_text(f"drain breaker of {cluster} reset by {args.who}"))
    else:
        status = await service.breaker_status(cluster)
        console.print(terminal_text(f"drain breaker of {cluster}: {breaker_line(status)}"))
    return 0


async def _decide(args: argparse.Namespace, settings: Settings, console: Console,
                  service: TemporalIncidentService) -> int:
    """An operator's decision on an incident (approve, reject, ...: the command is the verb)."""
    reason = reason_with_kind(getattr(args, "reason_kind", None), args.reason)
    decision = Decision(verb=DecisionVerb(args.command),
                        by=OperatorDecision(who=args.who, reason=reason, origin=CLI_ORIGIN))
    if args.dry_run:
        report = await service.get(args.incident_id)  # refuses an id that names nothing, as the decision would
        plan = "; ".join(f"{a.kind} {', '.join(a.nodes)}".strip() for a in report.plan.actions) if report.plan else ""
        console.print(terminal_text(f"would {args.command} incident {args.incident_id} (now {report.state}) as "
                                    f"{args.who}: {reason}" + (f"; its plan: {plan}" if plan else "")),
                      highlight=False)
        return 0
    state = await service.decide(args.incident_id, decision)
    console.print(f"{args.command} recorded; incident {args.incident_id} is now {state}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Settings, Console, TemporalIncidentService],
                           Awaitable[int]]] = {
    "incidents": _incidents,
    "advise": _advise,
    "faults": _faults,
    "lost-work": _lost_work,
    "audit": _audit,
    "incident": _incident,
    "nodes": _nodes,
    "kill-switch": _kill_switch,
    "breaker": _breaker,
    "trust": _trust,
}

async def readable_reports(service: TemporalIncidentService, limit: int,
                           cluster: str | None = None) -> tuple[list[IncidentReport], list[str]]:
    """The newest incidents' reports, newest first, and a line for each that could not be read (e.g. a
    running incident whose workers are all down): a report that cannot be had never stops the others.
    Read `READS_AT_ONCE` at a time: each unanswerable incident costs a query timeout, and one after
    another a few dozen of them would hold `lost-work` or `audit --from-histories` for minutes."""
    rows = await service.list_incidents(limit=limit, cluster=cluster)
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def read(incident_id: str) -> IncidentReport | str:
        async with gate:
            try:
                return await service.get(incident_id)
            except ServiceError as error:
                return f"{incident_id}: {error}"

    reads = [asyncio.ensure_future(read(row.incident_id)) for row in rows]
    results: list[IncidentReport | str] = []
    try:
        for pending in counted(reads, len(reads), "reading the incidents' reports"):
            results.append(await pending)
    finally:
        for pending in reads:
            pending.cancel()
    reports = [r for r in results if isinstance(r, IncidentReport)]
    return reports, [r for r in results if isinstance(r, str)]


def warn(message: str) -> None:
    """A warning as one line on stderr, never wrapped."""
    sys.stderr.write(f"warning: {error_line(message)}\n")


def breaker_line(status: BreakerState) -> str:
    opened = status.tripped_at.isoformat() if status.tripped_at else "closed"
    drained = sorted({n for g in status.grants for n in g.nodes})
    groups = "".join(f"; {group} tripped at {at.isoformat()}" for group, at in sorted(status.tripped_groups.items()))
    return (f"{opened}; trips={status.trips} refused={status.refused}; drained in window: "
            f"{', '.join(drained) or 'none'}{groups}")


def kill_switch_line(switch: KillSwitchState) -> str:
    now = "ENGAGED: every partition in monitor mode" if switch.engaged else "released"
    last = switch.last
    if last is None:
        return now
    verb = "engaged" if last.engaged else "released"
    return f"{now} ({verb} by {last.by.who} at {last.at:%Y-%m-%d %H:%M:%S}Z: {last.by.reason})"


def show_audit(args: argparse.Namespace, settings: Settings, rebuilt: Sequence[AuditRecord] = ()) -> int:
    log = JsonlAuditLog(settings.audit_path)
    start = parse_since(args.since, datetime.now(UTC)) if args.since else None
    render_audit(since(merged(log.read(), rebuilt), start), "jsonl" if args.json else args.format, sys.stdout)
    if log.skipped_lines:
        warn(f"{log.skipped_lines} unreadable line(s) in {settings.audit_path}")
    return 0


def cmd_advise(args: argparse.Namespace, mtbf_hours: float) -> int:
    return run_advise(os.path.abspath(args.root), args.layout, step_time_s=args.step_time, mtbf_hours=mtbf_hours,
                      gpus=args.gpus, restart_s=args.restart_s, as_json=args.json, out=sys.stdout, err=sys.stderr,
                      now=datetime.now(UTC))


