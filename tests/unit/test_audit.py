"""The audit trail's records, exports and log: what an auditor reads must be whole and safe to open."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from activities.adapters.audit import JsonlAuditLog
from goodput.recover.audit import AuditAction, AuditRecord, merged, parse_since, since, to_csv, to_jsonl

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
GOODPUT = [sys.executable, "-c", "from workers.main import main; main()"]


def record(n: int, **kw: object) -> AuditRecord:
    fields: dict[str, object] = {"id": f"inc-1#{n}", "at": T0 + timedelta(minutes=n), "actor": "goodput",
                                 "action": AuditAction.DRAIN, "incident_id": "inc-1", "cluster": "lab",
                                 "job_id": "42", "nodes": ("node2",), "reason": "xid 79", "result": "drained node2"}
    return AuditRecord.model_validate({**fields, **kw})


def test_merged_keeps_each_record_once_oldest_first() -> None:
    a, b = record(2), record(1)
    assert merged([a, b], [b.model_copy(update={"result": "a rebuilt copy"})]) == [b, a]


def test_since_takes_an_age_or_an_iso_time() -> None:
    assert parse_since("90m", T0) == T0 - timedelta(minutes=90)
    assert parse_since("7d", T0) == T0 - timedelta(days=7)
    assert parse_since("2026-11-30T08:00:00", T0) == datetime(2026, 11, 30, 8, tzinfo=UTC)
    with pytest.raises(ValueError, match="an age like"):
        parse_since("yesterday", T0)
    assert since([record(1), record(3)], T0 + timedelta(minutes=2)) == [record(3)]


def test_csv_cells_never_run_as_spreadsheet_formulas() -> None:
    """A reason is typed by a person (or copied from a job's log): `=HYPERLINK(...)` stays text."""
    rows = list(csv.DictReader(io.StringIO(to_csv([record(1, reason='=HYPERLINK("http://x","y")', actor="@op")]))))
    assert rows[0]["reason"].startswith("'=") and rows[0]["actor"] == "'@op"
    assert rows[0]["nodes"] == "node2" and rows[0]["action"] == "drain"


def test_the_log_appends_reads_back_and_survives_a_torn_line(tmp_path: Path) -> None:
    log = JsonlAuditLog(tmp_path / "audit.jsonl")
    log.append([record(1), record(2)])
    log.append([record(2)])  # an activity retried after a crash
    with (tmp_path / "audit.jsonl").open("a") as raw:
        raw.write('{"id": "inc-1#3", "at": "2026-12')  # the worker died mid-write
    assert [r.id for r in log.read()] == ["inc-1#1", "inc-1#2"] and log.skipped_lines == 1
    assert [json.loads(line)["id"] for line in to_jsonl(log.read()).splitlines()] == ["inc-1#1", "inc-1#2"]


def test_goodput_audit_reads_the_log_without_temporal(tmp_path: Path) -> None:
    JsonlAuditLog(tmp_path / "audit.jsonl").append([record(1), record(2, action=AuditAction.REQUEUE, nodes=())])
    done = subprocess.run([*GOODPUT, "audit", "--data-dir", str(tmp_path), "--format", "csv"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [r["action"] for r in rows] == ["drain", "requeue"]
    table = subprocess.run([*GOODPUT, "audit", "--data-dir", str(tmp_path), "--since", "2026-12-01T09:01:30"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert table.returncode == 0 and "requeue" in table.stdout and "drain " not in table.stdout
