"""What the Recovery Console shows, decided from incidents as data: no web framework, no Temporal.

Each function answers one operator question from the same models the CLI prints: what exactly
will approving do, how long is left to decide, how often has this job failed before, why did
this job not recover (the first rung of the ladder that failed), which nodes keep coming back,
which mode each partition really acts in. The web layer (workers.console) only fetches and
renders, so every answer is testable here without a browser.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from goodput.models import ActionKind, Frozen, Mode, RecoveryPlan
from goodput.recover.incident import IncidentReport
from goodput.recover.kill_switch import KillSwitchState, effective_mode
from goodput.recover.lifecycle import IncidentState
from goodput.recover.policy import Policy
from goodput.service.incidents import IncidentSummary

FAILED_STATES = frozenset({IncidentState.ESCALATED.value, IncidentState.STOPPED.value,
                           IncidentState.CANCELLED.value})


def planned_effects(plan: RecoveryPlan | None, job_id: str) -> list[str]:
    """Exactly what approving will do to the cluster, one line per action, in order."""
    if plan is None:
        return ["nothing: no plan yet"]
    lines: list[str] = []
    for action in plan.actions:
        if action.kind is ActionKind.DRAIN_NODES:
            lines.append(f"drain {', '.join(action.nodes)} (Slurm drain with goodput's reason)")
        elif action.kind is ActionKind.REQUEUE:
            lines.append(f"requeue job {job_id}")
        elif action.kind is ActionKind.RESUBMIT:
            excluded = f", excluding {', '.join(action.exclude)}" if action.exclude else ""
            lines.append(f"resubmit job {job_id} as its owner{excluded}")
        elif action.kind is ActionKind.STOP_JOB:
            lines.append(f"stop job {job_id}")
        else:
            lines.append("notify")
    return lines or ["nothing on the cluster (notify only)"]


def approval_deadline(report: IncidentReport, policy: Policy) -> datetime | None:
    """When an incident awaiting approval times out (escalates), by this deployment's policy."""
    if report.state is not IncidentState.AWAITING_APPROVAL:
        return None
    entered = [e.at for e in report.timeline if e.state is IncidentState.AWAITING_APPROVAL]
    return entered[-1] + timedelta(seconds=policy.approval_timeout_s) if entered else None


def step_durations(report: IncidentReport) -> list[tuple[str, datetime, float | None, str]]:
    """Each timeline state with how long the incident stayed in it (None: still there)."""
    events = list(report.timeline)
    rows: list[tuple[str, datetime, float | None, str]] = []
    for i, event in enumerate(events):
        nxt = events[i + 1].at if i + 1 < len(events) else None
        rows.append((event.state.value, event.at,
                     None if nxt is None else max(0.0, (nxt - event.at).total_seconds()), event.detail))
    return rows


def earlier_failures(summaries: Sequence[IncidentSummary]) -> dict[str, int]:
    """Per incident, how many earlier incidents of the same job did not end recovered: a
    retry that finally worked must not bury the attempts that failed before it."""
    by_job: dict[tuple[str, str], list[IncidentSummary]] = defaultdict(list)
    for s in summaries:
        by_job[(s.cluster, s.job_id)].append(s)
    badges: dict[str, int] = {}
    for group in by_job.values():
        group.sort(key=lambda s: (s.started_at or datetime.min, s.incident_id))
        failed = 0
        for s in group:
            badges[s.incident_id] = failed
            if s.state in FAILED_STATES:
                failed += 1
    return badges


def state_counts(summaries: Iterable[IncidentSummary]) -> dict[str, int]:
    counts: dict[str, int] = {state.value: 0 for state in IncidentState}
    for s in summaries:
        counts[s.state] = counts.get(s.state, 0) + 1
    return counts


class Rung(Frozen):
    name: str
    passed: bool | None  # None: not reached
    detail: str = ""


def recovery_ladder(job_id: str, seen_by_watcher: bool, report: IncidentReport | None) -> list[Rung]:
    """Why didn't this job recover? The rungs from seeing the job to verifying its progress, each
    passed, failed (with why) or not reached; the first failed rung is the answer."""
    rungs = [Rung(name="job seen", passed=seen_by_watcher or report is not None,
                  detail="" if seen_by_watcher or report is not None else
                  f"no watcher reported job {job_id}: is it opted in (goodput:... in its comment)?")]
    if report is None:
        rungs.append(Rung(name="signal seen", passed=False, detail="no anomaly was ever submitted for this job"))
        return _unreached(rungs, "incident opened", "plan", "gate", "action", "verification")
    rungs.append(Rung(name="signal seen", passed=True, detail=f"{report.anomaly_count} anomaly(ies)"))
    rungs.append(Rung(name="incident opened", passed=True, detail=report.incident_id))
    if report.plan is None:
        rungs.append(Rung(name="plan", passed=report.state not in FAILED_STATES,
                          detail=f"no plan (incident {report.state})"))
        return _unreached(rungs, "gate", "action", "verification")
    acts = [a for a in report.plan.actions if a.kind is not ActionKind.NOTIFY]
    rungs.append(Rung(name="plan", passed=bool(acts), detail=report.plan.rationale if acts else
                      f"the plan takes no action: {report.plan.rationale}"))
    if not acts:
        return _unreached(rungs, "gate", "action", "verification")
    gate_detail = _gate_detail(report)
    if gate_detail:
        rungs.append(Rung(name="gate", passed=False, detail=gate_detail))
        return _unreached(rungs, "action", "verification")
    rungs.append(Rung(name="gate", passed=True, detail=f"{report.mode} mode"))
    acted = bool(report.actions_done)
    rungs.append(Rung(name="action", passed=acted if acted or report.state in FAILED_STATES else None,
                      detail="; ".join(report.actions_done) or "no action taken yet"))
    if not acted:
        return _unreached(rungs, "verification")
    verified = report.state is IncidentState.RECOVERED
    rungs.append(Rung(name="verification", passed=True if verified else
                      (False if report.state in (IncidentState.ESCALATED, IncidentState.STOPPED) else None),
                      detail=_last_detail(report)))
    return rungs


def _gate_detail(report: IncidentReport) -> str:
    if report.state is IncidentState.RECOMMENDED_ONLY:
        return f"{report.mode} mode: goodput recommended and did not act"
    if report.state is IncidentState.AWAITING_APPROVAL:
        return "waiting for an operator to approve"
    if report.state is IncidentState.CANCELLED and not report.actions_done:
        who = f" by {report.decision.who}: {report.decision.reason}" if report.decision else ""
        return f"cancelled{who}"
    if report.plan is not None and report.plan.blocked_by_blast_radius:
        return "blocked by the blast-radius limit"
    if report.state is IncidentState.ESCALATED and not report.actions_done:
        return _last_detail(report)
    return ""


def _last_detail(report: IncidentReport) -> str:
    details = [e.detail for e in report.timeline if e.detail]
    return details[-1] if details else str(report.state)


def _unreached(rungs: list[Rung], *names: str) -> list[Rung]:
    return [*rungs, *(Rung(name=n, passed=None) for n in names)]


class PartitionMode(Frozen):
    partition: str
    configured: Mode
    effective: Mode
    why: str = ""


def partition_modes(policy: Policy, switch: KillSwitchState) -> list[PartitionMode]:
    """The mode each partition acts in now: its configured mode, unless the kill switch holds it."""
    rows = [("(default)", policy.mode), *sorted(policy.partition_modes.items())]
    out: list[PartitionMode] = []
    for partition, configured in rows:
        effective, why = effective_mode(configured, switch)
        out.append(PartitionMode(partition=partition, configured=configured, effective=effective, why=why))
    return out


def node_grid(summaries: Sequence[IncidentSummary], now: datetime, days: int = 14) -> list[tuple[str, list[int]]]:
    """Incidents per culprit node per day over the last `days` (oldest first): lemon nodes show
    as rows with many marks. Nodes with the most incidents first."""
    start = (now - timedelta(days=days - 1)).date()
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * days)
    for s in summaries:
        if s.started_at is None:
            continue
        day = (s.started_at.date() - start).days
        if 0 <= day < days:
            for node in s.culprit_nodes:
                counts[node][day] += 1
    return sorted(counts.items(), key=lambda item: (-sum(item[1]), item[0]))


class JobRow(Frozen):
    cluster: str
    job_id: str
    incidents: int
    failed: int
    recovered: int
    open: int
    last_state: str


def job_rows(summaries: Sequence[IncidentSummary]) -> list[JobRow]:
    by_job: dict[tuple[str, str], list[IncidentSummary]] = defaultdict(list)
    for s in summaries:
        by_job[(s.cluster, s.job_id)].append(s)
    rows = []
    for (cluster, job), group in by_job.items():
        group.sort(key=lambda s: (s.started_at or datetime.min, s.incident_id))
        rows.append(JobRow(cluster=cluster, job_id=job, incidents=len(group),
                           failed=sum(s.state in FAILED_STATES for s in group),
                           recovered=sum(s.state == IncidentState.RECOVERED.value for s in group),
                           open=sum(s.running for s in group), last_state=group[-1].state))
    return sorted(rows, key=lambda r: (-r.incidents, r.cluster, r.job_id))


def gpu_hours_saved(report: IncidentReport, policy: Policy, manual_recovery_s: float) -> float | None:
    """For a recovered incident: GPU-hours goodput saved against a person recovering the job by
    hand in `manual_recovery_s` (an estimate; the baseline is the site's to set). None when the
    incident did not recover or its job's size is unknown."""
    if report.state is not IncidentState.RECOVERED or report.job is None or not report.anomalies:
        return None
    gpus = len(report.job.nodes) * policy.gpus_per_node
    recovered_at = report.timeline[-1].at if report.timeline else None
    if not gpus or recovered_at is None:
        return None
    downtime = (recovered_at - min(a.observed_at for a in report.anomalies)).total_seconds()
    return max(0.0, manual_recovery_s - downtime) / 3600 * gpus
