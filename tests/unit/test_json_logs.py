"""Structured logs carry the incident and workflow each line is about."""

from __future__ import annotations

import json
import logging

from workers.logs import JsonFormatter


def record(message: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("goodput.watch", logging.WARNING, __file__, 1, message, None, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_a_workflow_line_names_its_incident() -> None:
    line = json.loads(JsonFormatter().format(record(
        "notification failed", temporal_workflow={"workflow_id": "incident-lab-42-0-ab12", "run_id": "r1",
                                                  "workflow_type": "RecoveryWorkflow", "namespace": "default"})))
    assert line["incident_id"] == line["workflow_id"] == "incident-lab-42-0-ab12"
    assert (line["level"], line["logger"], line["message"]) == ("WARNING", "goodput.watch", "notification failed")


def test_an_activity_line_names_its_workflow_and_step() -> None:
    line = json.loads(JsonFormatter().format(record(
        "drained", temporal_activity={"activity_type": "isolate", "workflow_id": "incident-x", "attempt": 2,
                                      "workflow_type": "RecoveryWorkflow"})))
    assert (line["activity_type"], line["workflow_id"], line["attempt"], line["incident_id"]) == (
        "isolate", "incident-x", 2, "incident-x")


def test_a_plain_line_is_plain_json() -> None:
    line = json.loads(JsonFormatter().format(record("watching 3 jobs")))
    assert set(line) == {"ts", "level", "logger", "message"}
