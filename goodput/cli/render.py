"""How incidents look in a terminal: the list table and the timeline of one incident.

Every string an incident carries may be a job's (log lines, node names a log claimed, the
explanation and rationale that quote them) or an operator's: each enters a renderable through
`t()` (goodput.cli.terminal), as text, never as rich markup, control characters spelled out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from goodput.checkpoints import LostWorkSummary
from goodput.cli.terminal import terminal_text
from goodput.diagnose.node_memory import NodeStanding
from goodput.recover.incident import IncidentReport
from goodput.service.faults import NodeFault
from goodput.service.incidents import IncidentSummary

_STATE_STYLE = {
    "recovered": "green", "recommended-only": "cyan", "awaiting-approval": "yellow bold",
    "awaiting-evidence": "yellow", "pending-exclusion": "yellow",
    "escalated": "red bold", "cancelled": "magenta", "stopped": "red",
}


def t(value: object, style: str = "") -> Text:
    return terminal_text(str(value), style=style)


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else "-"


def incidents_table(rows: Sequence[IncidentSummary]) -> Table:
    table = Table(title="goodput incidents", show_lines=False)
    for column in ("incident", "job", "state", "mode", "category", "culprits", "started"):
        table.add_column(column, overflow="fold")
    for row in rows:
        state = t(row.state or "?", style=_STATE_STYLE.get(row.state, ""))
        table.add_row(t(row.incident_id), t(row.job_id), state, t(row.mode), t(row.category or "-"),
                      t(", ".join(row.culprit_nodes) or "-"), _when(row.started_at))
    return table


def incident_detail(report: IncidentReport) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_row("incident", t(report.incident_id))
    head.add_row("job", t(f"{report.key.job_id} (attempt {report.key.job_attempt}) on {report.key.cluster}"))
    head.add_row("state", t(report.state, style=_STATE_STYLE.get(str(report.state), "")))
    head.add_row("mode", t(report.mode))
    head.add_row("anomalies", str(report.anomaly_count))
    if report.attribution:
        a = report.attribution
        culprits = ", ".join(f"{c.kind}:{c.id} ({c.confidence:.0%})" for c in a.culprits) or "-"
        head.add_row("category", t(a.category))
        head.add_row("culprits", t(culprits))
        head.add_row("why", t(a.explanation))
    if report.decision:
        head.add_row("decision", t(f"{report.decision_verb} by {report.decision.who}: {report.decision.reason}"))
    if report.plan and report.plan.pending_exclusion:  # a straggler's node, kept off the job's next restart
        head.add_row("pending exclusion", t(f"{', '.join(report.plan.pending_exclusion)} at the job's next restart"))
    if report.resumed_job_id:
        head.add_row("resumed as", t(report.resumed_job_id))
    if report.node_incidents:  # one fault, many jobs: `goodput faults` lists the others it hit
        head.add_row("node incidents", t(", ".join(report.node_incidents)))
    for waiting in report.waiting:  # a step Temporal is retrying says why here, not in a log
        head.add_row("waiting for", t(waiting.describe(), style="yellow" if waiting.last_failure else ""))

    plan = Table(title="plan", show_header=True)
    plan.add_column("#")
    plan.add_column("action")
    plan.add_column("details", overflow="fold")
    if report.plan:
        for i, action in enumerate(report.plan.actions, 1):
            target = ", ".join(action.nodes) or (f"exclude {', '.join(action.exclude)}"
                                                 if action.exclude else "")
            plan.add_row(str(i), t(action.kind), t(" ".join(filter(None, (target, action.reason)))))

    timeline = Table(title="timeline", show_header=True)
    timeline.add_column("at")
    timeline.add_column("state")
    timeline.add_column("what", overflow="fold")
    for event in report.timeline:
        timeline.add_row(_when(event.at), t(event.state, style=_STATE_STYLE.get(str(event.state), "")),
                         t(event.detail))

    # One line per evidence line: a newline inside one is spelled out, so a job cannot forge lines.
    evidence = Text("\n").join(t(line) for a in report.anomalies[:5] for line in a.evidence[:3]) or Text("(none)")
    rationale = t(report.plan.rationale) if report.plan else Text("not planned yet")
    return Group(head, Panel(rationale, title="recommendation" if str(report.state) == "recommended-only"
                             else "rationale"), plan, timeline, Panel(evidence, title="evidence (first lines)"))


def print_to(console: Console, *renderables: object) -> None:
    for item in renderables:
        console.print(item)


def nodes_table(cluster: str, standings: Sequence[NodeStanding]) -> Table:
    """`goodput nodes`: what unrelated incidents say about each node, most suspect first."""
    table = Table(title=f"node memory of {cluster}: nodes implicated by incidents (decayed score)")
    for column in ("node", "score", "jobs", "users", "last", "suspect"):
        table.add_column(column, justify="right" if column == "score" else "left")
    for s in standings:
        # A suspect mark: incidents excluded the node from their job on their log alone, not drained.
        marked = f"excluded, not drained ({len(s.marked_by)})" if s.marked_by else ""
        table.add_row(t(s.node), f"{s.score:.2f}", t(", ".join(s.jobs)), t(", ".join(s.users)), _when(s.last_at),
                      Text("yes" + (f"; {marked}" if marked else ""), style="bold red") if s.suspect
                      else Text(marked, style="yellow") if marked else "no")
    return table


def lost_work_table(summary: LostWorkSummary) -> Table:
    table = Table(title=f"lost work over {summary.incidents} incident(s) with a known checkpoint and progress")
    for column in ("cluster", "job", "iterations", "hours", "GPU-hours"):
        table.add_column(column, justify="right" if column not in ("cluster", "job") else "left")
    for cluster, jobs in sorted(summary.by_job.items()):
        for job_id, lost in sorted(jobs.items()):
            table.add_row(t(cluster), t(job_id), str(lost.iterations), f"{lost.seconds / 3600:.2f}",
                          f"{lost.gpu_hours:.1f}")
        per = summary.by_cluster[cluster]
        table.add_row(t(cluster), "[bold]all[/]", str(per.iterations), f"{per.seconds / 3600:.2f}",
                      f"{per.gpu_hours:.1f}")
    table.add_row("[bold]total[/]", "", str(summary.total.iterations), f"{summary.total.seconds / 3600:.2f}",
                  f"{summary.total.gpu_hours:.1f}")
    return table


def faults_table(faults: Sequence[NodeFault]) -> Table:
    """`goodput faults`: one row per node fault, with every job it hit."""
    table = Table(title="faults: one node fault and every job it hit (node incidents; unlinked incidents "
                        "grouped by the node they blamed, close together)")
    for column in ("node", "from", "to", "jobs", "categories", "node incident", "incidents"):
        table.add_column(column, overflow="fold")
    for f in faults:
        table.add_row(t(f.node), _when(f.first_at), _when(f.last_at), t(f"{f.hit}: {', '.join(f.jobs)}"),
                      t(", ".join(f.categories)), Text("\n").join((t(f.node_incident), t(f.isolation)))
                      if f.node_incident else "(grouped by time, not linked)",
                      Text("\n").join(t(f"{s.incident_id} ({s.state or '?'})") for s in f.incidents))
    return table
