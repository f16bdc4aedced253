"""Structured logs: one JSON object per line, with the incident and workflow each line is about.

Operators ship worker logs to a log store and search them by incident. temporalio's workflow and
activity loggers attach their context to each record (`temporal_workflow`, `temporal_activity`);
this formatter lifts the workflow id (a recovery's workflow id is its incident id), run id,
workflow and activity type into fields of their own, so a query for one incident finds every line
of its recovery whichever worker wrote it. `GOODPUT_LOG_FORMAT=json` in the environment
turns it on; the default stays human-readable text.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        for source in ("temporal_workflow", "temporal_activity"):
            context = getattr(record, source, None)
            if isinstance(context, dict):
                for key in ("workflow_id", "run_id", "workflow_type", "activity_type", "activity_id", "attempt"):
                    if key in context and key not in line:
                        line[key] = context[key]
        if str(line.get("workflow_type", "")) == "RecoveryWorkflow":
            line["incident_id"] = line.get("workflow_id")
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(log_format: str, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
