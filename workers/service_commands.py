"""The operator commands that talk to a running goodput through the incident service.

`goodput inject`, `incidents`, `incident`, `faults`, `nodes`, `lost-work`, `audit --from-histories`,
`advise --nodes`, `kill-switch`, `breaker` and the decisions (approve, reject, ...): each one a
function of the parsed arguments and a connected `TemporalIncidentService`, looked up by command
name, so `workers.main` only parses, picks and reports errors.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from rich.console import Console
from rich.text import Text

from activities.adapters.audit import JsonlAuditLog
from goodput.checkpoints import IncidentLoss, summarize_lost_work
from goodput.checkpoints.advice import node_failure_rate_per_hour
from goodput.cli.advise import run_advise
from goodput.cli.anomaly_input import AnomalyInputError, from_flags, from_json_file
from goodput.cli.audit import render as render_audit
from goodput.cli.render import faults_table, incident_detail, incidents_table, lost_work_table, nodes_table
from goodput.cli.terminal import terminal_text
from goodput.config import Settings
from goodput.identifiers import validate_cluster
from goodput.models import Mode, OperatorDecision
from goodput.recover.audit import AuditRecord, merged, parse_since, since
from goodput.recover.incident import Decision, DecisionVerb, IncidentReport
from goodput.recover.kill_switch import KillSwitchState
from goodput.service.faults import all_faults
from goodput.service.incidents import ServiceError
from workers.client import TemporalIncidentService, connect_from

CLI_ORIGIN = f"cli on {socket.gethostname()}"[:200]


async def cmd_client(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    """Run the service command `args.command` names; any other is a decision on an incident."""
    service = TemporalIncidentService(await connect_from(settings),
                                      settings.task_queue)
    return await COMMANDS.get(args.command, _decide)(args, settings, console, service)


async def _inject(args: argparse.Namespace, settings: Settings, console: Console,
                  service: TemporalIncidentService) -> int:
    """Open an incident (or add to one) from an anomaly given by flags or a JSON file."""
    now = datetime.now(UTC)
    if args.file:
        anomaly = from_json_file(args.file, now)
    elif args.job:
        anomaly = from_flags(job_id=args.job, kind=args.kind, cluster=args.cluster or settings.cluster,
                             attempt=args.attempt, nodes=args.node, evidence=args.evidence,
                             category=args.category, now=now)
    else:
        raise AnomalyInputError("inject needs --job (with flags) or --file")
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
    window = now - parse_since(args.window, now)
    rate = node_failure_rate_per_hour(await service.list_incidents(limit=10_000), args.cluster_nodes, now,
                                      window)
    if rate <= 0:
        raise AnomalyInputError(f"no node failure in the last {args.window}: give --mtbf-hours")
    return cmd_advise(args, 1 / (rate * args.nodes))


async def _faults(args: argparse.Namespace, settings: Settings, console: Console,
                  service: TemporalIncidentService) -> int:
    """The node faults of a cluster: its node incidents and the incidents grouped by the node they blame."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    found = all_faults(await service.node_incidents(cluster), await service.list_incidents(
        limit=args.limit, cluster=cluster), timedelta(minutes=args.window))
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
        Console(stderr=True).print(Text("skipped ", style="yellow") + terminal_text(line), highlight=False)
    return 0


async def _audit(args: argparse.Namespace, settings: Settings, console: Console,
                 service: TemporalIncidentService) -> int:
    """The audit trail rebuilt from the incidents' histories, merged with the log on disk."""
    reports, unreadable = await readable_reports(service, args.limit)
    for line in unreadable:
        Console(stderr=True).print(Text("skipped ", style="yellow") + terminal_text(line), highlight=False)
    show_audit(args, settings, [record for r in reports for record in r.audit])
    return 0


async def _incident(args: argparse.Namespace, settings: Settings, console: Console,
                    service: TemporalIncidentService) -> int:
    """One incident's report."""
    report = await service.get(args.incident_id)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        console.print(incident_detail(report))
    return 0


async def _nodes(args: argparse.Namespace, settings: Settings, console: Console,
                 service: TemporalIncidentService) -> int:
    """Each node's standing and the nodes on their way back to service."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    standings = await service.node_standing(cluster)
    if args.json:
        print(json.dumps([s.model_dump(mode="json") for s in standings]))
    else:
        returns = await service.node_health(cluster)
        console.print(nodes_table(cluster, standings))
        for h in returns:
            console.print(terminal_text(f"return to service: {h.node} {h.phase} (incident {h.incident_id}): "
                                        f"{h.why}"), highlight=False)
    return 0


async def _kill_switch(args: argparse.Namespace, settings: Settings, console: Console,
                       service: TemporalIncidentService) -> int:
    """Show, engage or release a cluster's kill switch."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    if args.action != "status" and not args.reason:
        raise AnomalyInputError(f"kill-switch {args.action} needs --reason")
    by = OperatorDecision(who=args.who, reason=args.reason, origin=CLI_ORIGIN) if args.action != "status" else None
    switch = await service.kill_switch(cluster, None if by is None else args.action == "on", by)
    console.print(terminal_text(f"kill switch of {cluster}: {kill_switch_line(switch)}"), highlight=False)
    return 0


async def _breaker(args: argparse.Namespace, settings: Settings, console: Console,
                   service: TemporalIncidentService) -> int:
    """Show or reset a cluster's drain breaker."""
    cluster = validate_cluster(args.cluster or settings.cluster)
    if args.action == "reset":
        if not args.reason:
            raise AnomalyInputError("breaker reset needs --reason")
        await service.breaker_reset(cluster, OperatorDecision(who=args.who, reason=args.reason, origin=CLI_ORIGIN))
        console.print(terminal_text(f"drain breaker of {cluster} reset by {args.who}"))
    else:
        status = await service.breaker_status(cluster)
        opened = status.tripped_at.isoformat() if status.tripped_at else "closed"
        drained = sorted({n for g in status.grants for n in g.nodes})
        console.print(terminal_text(f"drain breaker of {cluster}: {opened}; trips={status.trips} "
                                    f"refused={status.refused}; drained in window: {', '.join(drained) or 'none'}"
                                    + "".join(f"; {group} tripped at {at.isoformat()}"
                                              for group, at in sorted(status.tripped_groups.items()))))
    return 0


async def _decide(args: argparse.Namespace, settings: Settings, console: Console,
                  service: TemporalIncidentService) -> int:
    """An operator's decision on an incident (approve, reject, ...: the command is the verb)."""
    decision = Decision(verb=DecisionVerb(args.command),
                        by=OperatorDecision(who=args.who, reason=args.reason, origin=CLI_ORIGIN))
    state = await service.decide(args.incident_id, decision)
    console.print(f"{args.command} recorded; incident {args.incident_id} is now {state}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Settings, Console, TemporalIncidentService],
                           Awaitable[int]]] = {
    "inject": _inject,
    "incidents": _incidents,
    "advise": _advise,
    "faults": _faults,
    "lost-work": _lost_work,
    "audit": _audit,
    "incident": _incident,
    "nodes": _nodes,
    "kill-switch": _kill_switch,
    "breaker": _breaker,
}

async def readable_reports(service: TemporalIncidentService, limit: int,
                           cluster: str | None = None) -> tuple[list[IncidentReport], list[str]]:
    """The newest incidents' reports, and a line for each that could not be read (e.g. a running
    incident whose workers are all down): a report that cannot be had never stops the others."""
    reports: list[IncidentReport] = []
    unreadable: list[str] = []
    for row in await service.list_incidents(limit=limit, cluster=cluster):
        try:
            reports.append(await service.get(row.incident_id))
        except ServiceError as error:
            unreadable.append(f"{row.incident_id}: {error}")
    return reports, unreadable


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
    render_audit(since(merged(log.read(), rebuilt), start), args.format, sys.stdout)
    if log.skipped_lines:
        Console(stderr=True).print(terminal_text(f"{log.skipped_lines} unreadable line(s) in {settings.audit_path}",
                                                 style="yellow"))
    return 0


def cmd_advise(args: argparse.Namespace, mtbf_hours: float) -> int:
    return run_advise(os.path.abspath(args.root), args.layout, step_time_s=args.step_time, mtbf_hours=mtbf_hours,
                      gpus=args.gpus, restart_s=args.restart_s, as_json=args.json, out=sys.stdout, err=sys.stderr,
                      now=datetime.now(UTC))


