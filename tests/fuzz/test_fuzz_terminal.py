"""Hostile text in the operator's terminal: whatever a job prints, `goodput incident` shows it
(no markup error stops it) and nothing in what reaches the terminal is a control or format
character the job chose (escape sequences, carriage returns, bidi overrides)."""

from __future__ import annotations

import io
import unicodedata
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from goodput.cli.render import incident_detail
from goodput.cli.terminal import visible
from goodput.models import Anomaly as AnomalyModel
from goodput.models import AnomalyKind, AnomalySource, IncidentKey, Mode
from goodput.recover.incident import IncidentReport, TimelineEvent
from goodput.recover.lifecycle import IncidentState
from tests.fuzz.harness import rejects_cleanly

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

T0 = datetime(2026, 12, 1, tzinfo=UTC)
PIECES = ["[", "]", "[/x]", "[/]", "[link=https://e.example]", "[bold", "\\", "\x1b", "\x1b[", "\x1b]52;c;",
          "\x1b]8;;", "\x07", "\x9b", "\x9d", "\r", "\n", "\t", "\x00", "\u202e", "\u2066", "\u200b", "\u2028",
          "\ud800", "\U000e0041", "m", "8m", "31;1m", ";", "é", "💥"]
hostile = st.one_of(st.text(max_size=200), st.lists(st.sampled_from(PIECES), max_size=40).map("".join))


def _shown(text: str) -> str:
    anomaly = AnomalyModel(id="a1", source=AnomalySource.LOG, kind=AnomalyKind.CRASH, job_id="1001",
                           evidence=[text], observed_at=T0, detected_at=T0)
    report = IncidentReport(incident_id="incident-x", key=IncidentKey(cluster="lab", job_id="1001", job_attempt=0),
                            state=IncidentState.DETECTED, mode=Mode.MONITOR, anomalies=(anomaly,),
                            timeline=(TimelineEvent(at=T0, state=IncidentState.DETECTED, detail=text),))
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system=None, width=120, legacy_windows=False).print(
        incident_detail(report))
    return out.getvalue()


@given(hostile)
def test_terminal_text(text: str) -> None:
    made = rejects_cleanly("terminal-text", lambda: visible(text), ())
    assert made is not None
    assert all(ch == " " or (ch.isprintable() and unicodedata.category(ch) not in ("Cf", "Cs", "Co", "Cn"))
               for ch in made), ascii(made)
    shown = rejects_cleanly("terminal-incident", lambda: _shown(text), ())
    assert shown is not None
    # Rich's own output is only text, spaces and newlines here (no colour system): any other
    # control character came from the job.
    assert all(ch == "\n" or unicodedata.category(ch) not in ("Cc", "Cf") for ch in shown), ascii(shown)
