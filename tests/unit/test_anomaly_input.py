"""`goodput inject` input: every bad input is a clear error, never a crash."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from goodput.cli.anomaly_input import AnomalyInputError, from_flags, from_json_file
from goodput.models import AnomalyKind, AnomalySource

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def flags(**over: object) -> dict[str, object]:
    base: dict[str, object] = {"job_id": "1001", "kind": "gpu-fault", "cluster": "default", "attempt": 0,
                               "nodes": ["node2"], "evidence": [], "category": None, "now": NOW}
    return {**base, **over}


def test_flags_make_an_operator_anomaly() -> None:
    a = from_flags(**flags())  # type: ignore[arg-type]
    assert a.source is AnomalySource.OPERATOR and a.kind is AnomalyKind.GPU_FAULT
    assert a.observed_at == NOW and a.id.startswith("manual-")


@pytest.mark.parametrize(("over", "message"), [
    ({"kind": "meltdown"}, "unknown kind 'meltdown'"),
    ({"job_id": "1;reboot"}, "job_id"),
    ({"nodes": ["node2\nnode3"]}, "nodes.0"),
    ({"attempt": -1}, "job_attempt"),
])
def test_bad_flags(over: dict[str, object], message: str) -> None:
    with pytest.raises(AnomalyInputError, match=message):
        from_flags(**flags(**over))  # type: ignore[arg-type]


@pytest.mark.parametrize(("content", "message"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "one JSON object"),
    (b"\xff\xfe\x00garbage", "not valid JSON"),
    (b'{"kind": "crash"}', "job_id"),
])
def test_bad_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(content)
    with pytest.raises(AnomalyInputError, match=message):
        from_json_file(path, NOW)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(AnomalyInputError, match="cannot read"):
        from_json_file(tmp_path / "nope.json", NOW)


def test_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('{"job_id": "55", "kind": "hang", "source": "log", "nodes": ["node4"]}')
    a = from_json_file(path, NOW)
    assert a.job_id == "55" and a.nodes == ("node4",) and a.source is AnomalySource.LOG


@pytest.mark.parametrize(("content", "message"), [
    (b'{"job_id": "55", "kind": "hang", "job_attempt": ' + b"9" * 5000 + b"}", "5000 characters"),
    (b'{"job_id": "55", "kind": "hang", "ranks": [' + b"1" * 20 + b"]}", "20 characters"),
    (b'{"job_id": "55", "kind": "hang", "step_time_s": NaN}', "NaN is not a number"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply|not valid JSON"),
    (b'{"job_id": "55", "kind": "hang", "evidence": ["bad \\ud800 text"]}', r"\\ud800, which is not Unicode"),
])
def test_hostile_files_are_clear_errors(tmp_path: Path, content: bytes, message: str) -> None:
    """Before: ValueError (int digits limit), RecursionError or a later UnicodeEncodeError escaped."""
    path = tmp_path / "a.json"
    path.write_bytes(content)
    with pytest.raises(AnomalyInputError, match=message):
        from_json_file(path, NOW)


def test_undecodable_argv_bytes_are_a_clear_error() -> None:
    with pytest.raises(AnomalyInputError, match="not Unicode"):
        from_flags(**flags(evidence=["log says \udcff"]))  # type: ignore[arg-type]
