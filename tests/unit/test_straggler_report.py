"""Straggler reports a job prints itself: read strictly, counted per rank, one anomaly per attempt."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from goodput.detect.live import LiveLogDetector
from goodput.detect.logtail import LogLine
from goodput.detect.straggler_report import (
    MARKER,
    ReportTally,
    StragglerReport,
    StragglerReportError,
    observe,
    parse_report,
)
from goodput.diagnose.attribution import attribute
from goodput.models import AnomalyKind, Category, IncidentKey
from goodput.scheduler import JobInfo, JobState

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)


def report(rank: int = 3, score: float = 0.41, **extra: object) -> str:
    return MARKER + json.dumps({"rank": rank, "score": score, **extra})


def test_the_format_and_nvrx_warning_text() -> None:
    assert parse_report(report(node="node2", section="forward")) == StragglerReport(
        rank=3, node="node2", score=0.41, section="forward")
    assert parse_report("  3: " + report()) == StragglerReport(rank=3, score=0.41)  # srun -l label
    nvrx = "STRAGGLER DETECTION WARNING: Rank=5 Node=gpu-a17 GPU relative performance Score=0.62"
    assert parse_report(nvrx) == StragglerReport(rank=5, node="gpu-a17", score=0.62)
    assert parse_report("iteration 100/ 2000 | loss 2.3") is None


@pytest.mark.parametrize(("line", "why"), [
    (MARKER + "{", "not JSON"),
    (MARKER + "[1, 2]", "JSON object"),
    (report(rank=-1), "rank must be"),
    (report(rank=2**40), "rank must be"),
    (report(score=1.5), "between 0 and 1"),
    (MARKER + '{"rank": 1, "score": NaN}', "finite"),
    (MARKER + '{"rank": true, "score": 0.1}', "rank must be"),
    (report(node="node2; reboot"), "node"),
    (report(extra_field=1), "unknown field"),
    (MARKER + '{"rank": 1, "score": 0.1, "section": {"a": {"b": {}}}}', "one flat JSON object"),
    (MARKER + "x" * 5000, "at most"),
])
def test_malformed_reports_are_typed_errors(line: str, why: str) -> None:
    with pytest.raises(StragglerReportError, match=why):
        parse_report(line)


def test_a_rank_lags_after_consecutive_low_scores_and_a_good_one_resets_it() -> None:
    tally = ReportTally()
    flags = []
    for score in (0.5, 0.5, 0.9, 0.5, 0.5, 0.5, 0.4):
        tally, lagging = observe(tally, StragglerReport(rank=3, score=score), 0.75, 3)
        flags.append(lagging)
    assert flags == [False, False, False, False, False, True, False]  # fires once, on the third in a row


def lines(*texts: str) -> list[LogLine]:
    return [LogLine(path="/l", offset=i * 100, line_no=i + 1, text=t, observed_at=T0) for i, t in enumerate(texts)]


def test_the_live_detector_reports_one_straggler_and_attribution_vouches_for_its_node() -> None:
    detector = LiveLogDetector.start(IncidentKey(cluster="c", job_id="42", job_attempt=0), T0)
    assert detector.feed(lines(report(node="node2"), report(rank=1, score=0.99, node="node1")), T0, T0) == []
    [anomaly] = detector.feed(lines(report(node="node2"), report(node="node2")), T0, T0)
    assert anomaly.kind is AnomalyKind.STRAGGLER and anomaly.ranks == (3,) and anomaly.nodes == ("node2",)
    assert detector.feed(lines(*[report(node="node2")] * 5), T0, T0) == []  # once per attempt
    mine = JobInfo(job_id="42", name="train", state=JobState.RUNNING, nodes=("node1", "node2"))
    blamed = attribute([anomaly], mine)
    assert blamed.category is Category.STRAGGLER and blamed.drain and blamed.culprit_nodes == ("node2",)
    elsewhere = JobInfo(job_id="42", name="train", state=JobState.RUNNING, nodes=("node7", "node8"))
    assert not attribute([anomaly], elsewhere).drain  # a node the job does not own: evidence only


# Megatron-LM's GPU sniff test (core_v0.18.0+, megatron/training/gpu_sniff_test.py), from rank 0.
SNIFF_TEST = [
    "[running GPU sniff test (interval)] datetime: 2026-09-01 10:00:00.000000",
    "  GPU sniff test -- interval",
    "  GEMM TFLOP/s: median=745.10, mean=731.02, min=512.40, max=761.88",
    "    OUTLIER rank 3 (gpu-a17): 512.40 (-31.2%)",
    "  all-reduce busbw GB/s: median=391.22, mean=392.00, min=388.10, max=441.70",
    "    OUTLIER rank 6 (gpu-a18): 441.70 (+12.9%)",
    "  Result: OUTLIERS DETECTED",
    "[finished GPU sniff test (interval)] datetime: 2026-09-01 10:00:02.000000",
]


def test_megatrons_sniff_test_outliers_are_reports_a_slower_one_low_a_faster_one_good() -> None:
    slow, fast = parse_report(SNIFF_TEST[3]), parse_report(SNIFF_TEST[5])
    assert slow is not None and (slow.rank, slow.node, slow.score) == (3, "gpu-a17", pytest.approx(0.688))
    assert fast == StragglerReport(rank=6, node="gpu-a18", score=1.0)
    bare = parse_report("    OUTLIER rank 4: 700.00 (-12.0%)")
    assert bare is not None and (bare.rank, bare.node, bare.score) == (4, None, pytest.approx(0.88))
    assert [parse_report(line) for line in SNIFF_TEST if "OUTLIER rank" not in line] == [None] * 6
    assert parse_report("    OUTLIER rank 4 (gpu-a1; reboot): 7.0 (-50.0%)") is None  # no node of that shape
    with pytest.raises(StragglerReportError, match="rank must be"):
        parse_report("    OUTLIER rank 9999999999 (gpu-a1): 7.0 (-50.0%)")


def test_three_slow_sniff_tests_in_a_row_make_a_straggler_of_the_rank() -> None:
    detector = LiveLogDetector.start(IncidentKey(cluster="c", job_id="42", job_attempt=0), T0)
    assert detector.feed(lines(*SNIFF_TEST, *SNIFF_TEST), T0, T0) == []
    [anomaly] = detector.feed(lines(*SNIFF_TEST), T0, T0)
    assert anomaly.kind is AnomalyKind.STRAGGLER and anomaly.ranks == (3,) and anomaly.nodes == ("gpu-a17",)
