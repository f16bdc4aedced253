"""Which pushed anomalies may move goodput to act (goodput.diagnose.provenance), and the record's
`file` field as the push parser reads it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from goodput.detect.push import PushConfig, PushRouter, StreamKey, parse_batch
from goodput.diagnose.provenance import PushedPathError, check_pushed_path, sort_evidence, unverified_reason
from goodput.models import Anomaly, AnomalyKind, AnomalySource, PushedFrom
from goodput.scheduler import JobInfo, JobState

NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)
OUT = "/shared/slurm/logs/alice/slurm-42.out"
JOB = JobInfo(job_id="42", state=JobState.RUNNING, stdout_path=OUT, stderr_path=OUT, user_id=1001)
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def anomaly(file: str | None, name: str = "a") -> Anomaly:
    return Anomaly(id=name, source=AnomalySource.LOG, kind=AnomalyKind.GPU_FAULT, job_id="42", observed_at=NOW,
                   detected_at=NOW, pushed=None if file is None else PushedFrom(file=file))


def test_what_goodput_observed_itself_may_act() -> None:
    assert unverified_reason(anomaly(None), JOB) == "" and unverified_reason(anomaly(None), None) == ""


@pytest.mark.parametrize(("file", "job", "owners", "why"), [
    ("", JOB, {}, "names no file"),
    ("/shared/slurm/logs/mallory/slurm-42.out", JOB, {}, "which is not job 42's output ('/shared/slurm/logs/alice"),
    (OUT + " ", JOB, {}, "not job 42's output"),
    (OUT, None, {}, "no record of job 42"),
    (OUT, JOB.model_copy(update={"stdout_path": "/w/slurm-%j.out", "stderr_path": ""}), {},
     "only the pattern '/w/slurm-%j.out'"),
    (OUT, JOB.model_copy(update={"stdout_path": "", "stderr_path": ""}), {}, "no output path"),
    (OUT, JOB, {OUT: 1002}, "owned by uid 1002, not by the job's user (uid 1001)"),
    (OUT, JOB.model_copy(update={"user_id": None}), {OUT: 1001}, "Slurm names no job owner"),
])
def test_evidence_only(file: str, job: JobInfo | None, owners: dict[str, int], why: str) -> None:
    assert why in unverified_reason(anomaly(file), job, owners)


def test_the_jobs_own_output_owned_by_its_user_or_not_visible_may_act() -> None:
    assert unverified_reason(anomaly(OUT), JOB, {OUT: 1001}) == ""
    assert unverified_reason(anomaly(OUT), JOB, {}) == ""  # goodput cannot see the file: the path decides


def test_sorting_keeps_the_order_and_says_how_many_were_set_aside() -> None:
    forged, own, seen = anomaly("/tmp/slurm-42.out", "f"), anomaly(OUT, "o"), anomaly(None, "s")
    evidence = sort_evidence([forged, own, seen], JOB)
    assert evidence.actionable == (own, seen) and [a.id for a, _ in evidence.evidence_only] == ["f"]
    assert evidence.note.startswith("1 pushed anomaly is evidence only, never acted on: pushed from '/tmp/")
    assert sort_evidence([own], JOB).note == ""


@pytest.mark.parametrize(("value", "why"), [
    ("/a\n/b", "unprintable character '\\n'"), ("/a\u202eb", "unprintable"), ("/a\ud800", "not valid UTF-8"),
    ("/" * 4097, "4097 characters long"),
])
def test_a_file_path_goodput_will_not_carry(value: str, why: str) -> None:
    with pytest.raises(PushedPathError) as raised:
        check_pushed_path(value)
    assert why in str(raised.value)


def test_the_record_file_is_read_checked_and_keeps_streams_apart() -> None:
    config = PushConfig()
    lines = [{"log": XID, "job_id": "42", "host": "node1", "file": OUT},
             {"log": XID, "job_id": "42", "host": "node1", "path": "/shared/slurm/logs/mallory/slurm-42.out"},
             {"log": XID, "job_id": "42", "host": "node1", "file": {"nested": 1}},
             {"log": XID, "job_id": "42", "host": "node1", "file": "/x\n/y"}]
    body = "".join(json.dumps(r) + "\n" for r in lines).encode()
    batch = parse_batch(body, config, cluster="lab", received_at=NOW)
    assert list(batch.streams) == [StreamKey("lab", "42", 0, "node1", OUT),
                                   StreamKey("lab", "42", 0, "node1", "/shared/slurm/logs/mallory/slurm-42.out")]
    assert [(r.line, r.reason) for r in batch.rejected] == [
        (3, "file field 'file' must be a string, got an object"),
        (4, "file path holds the unprintable character '\\n'")]
    found = PushRouter(config).route(batch, NOW)
    assert sorted(a.pushed.file for a in found if a.pushed) == sorted(
        [OUT, "/shared/slurm/logs/mallory/slurm-42.out"])
    assert len({a.id for a in found}) == 2
