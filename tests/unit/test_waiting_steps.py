"""What a running incident waits for, read from Temporal's description of the run: the step it
retries, which attempt, the failure it retries and when it tries next."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from jinja2 import Environment, FileSystemLoader
from rich.console import Console
from temporalio.api.common.v1 import ActivityType
from temporalio.api.failure.v1 import Failure
from temporalio.api.workflow.v1 import PendingActivityInfo

from goodput.cli.render import incident_detail
from goodput.models import IncidentKey, Mode
from goodput.recover.incident import IncidentReport
from goodput.recover.lifecycle import IncidentState
from workers.client import waiting_steps

NEXT = datetime(2026, 12, 1, 22, 0, 5, tzinfo=UTC)


def retried_requeue() -> PendingActivityInfo:
    info = PendingActivityInfo(activity_type=ActivityType(name="resume"), attempt=3,
                               last_failure=Failure(message="scontrol requeue 1001: Socket timed out\n on send/recv"))
    info.next_attempt_schedule_time.FromDatetime(NEXT)
    return info


def test_a_retried_step_names_its_attempt_failure_and_next_try() -> None:
    [waiting] = waiting_steps([retried_requeue()])
    assert (waiting.step, waiting.attempt) == ("resume", 3)
    assert waiting.last_failure == "scontrol requeue 1001: Socket timed out on send/recv"
    assert waiting.next_attempt_at == NEXT
    assert waiting.describe() == ("resume (attempt 3), last failure: scontrol requeue 1001: Socket timed out on "
                                  "send/recv; next attempt at 22:00:05 UTC")


def test_a_step_running_for_the_first_time_has_no_failure() -> None:
    [waiting] = waiting_steps([PendingActivityInfo(activity_type=ActivityType(name="verify"))])
    assert (waiting.step, waiting.attempt, waiting.last_failure, waiting.next_attempt_at) == ("verify", 1, "", None)


def test_a_huge_failure_message_is_clipped() -> None:
    info = PendingActivityInfo(activity_type=ActivityType(name="resume"), attempt=2,
                               last_failure=Failure(message="x" * 10_000))
    [waiting] = waiting_steps([info])
    assert len(waiting.last_failure) == 600


def test_goodput_show_prints_what_the_incident_waits_for() -> None:
    report = IncidentReport(incident_id="incident-x", key=IncidentKey(cluster="lab", job_id="1001", job_attempt=0),
                            state=IncidentState.RESUMING, mode=Mode.AUTONOMOUS,
                            waiting=waiting_steps([retried_requeue()]))
    console = Console(width=200, record=True)
    console.print(incident_detail(report))
    assert "waiting for  resume (attempt 3), last failure: scontrol requeue 1001" in console.export_text()


def test_the_console_incident_page_shows_what_the_incident_waits_for() -> None:
    templates = Path(__file__).resolve().parents[2] / "workers" / "console" / "templates"
    env = Environment(loader=FileSystemLoader(templates), autoescape=True, trim_blocks=True, lstrip_blocks=True)
    report = IncidentReport(incident_id="incident-x", key=IncidentKey(cluster="lab", job_id="1001", job_attempt=0),
                            state=IncidentState.RESUMING, mode=Mode.AUTONOMOUS,
                            waiting=waiting_steps([retried_requeue()]))
    page = env.get_template("incident.html").render(r=report, steps=[], durations=[], effects=[], deadline=None,
                                                    temporal_link="#", decidable=True, flash="", who=None)
    block = page[page.index('id="waiting"'):]
    assert 'class="warn">resume (attempt 3), last failure: scontrol requeue 1001' in block[:600]
