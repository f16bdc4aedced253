"""Straggler reports a job prints itself: one line per rank and check, scored like NVRx's detector.

goodput finds stragglers from step times (goodput.detect.straggler), but a job often knows more:
NVRx's straggler detector scores each rank's relative performance per code section (1.0 = as
fast as the best, its default alarm below 0.75), and other tools do similar. NVRx has no file
format for its results, so goodput defines one, a line in the job's output:

    goodput:straggler {"rank": 3, "node": "node2", "score": 0.41, "section": "forward"}

(`node` and `section` optional). NVRx's Lightning callback's own warning,
`STRAGGLER DETECTION WARNING … Rank=3 … Node=node2 … Score=0.41`, is read too, and so are the
outliers of Megatron-LM's GPU sniff test (core_v0.18.0+, `--gpu-sniff-test-interval`,
megatron/training/gpu_sniff_test.py): `OUTLIER rank 3 (node2): 512.40 (-31.2%)`, a rank whose
GEMM TFLOP/s or collective bus bandwidth (all higher-is-better) lies more than max(MAD, 10 %) from
the median; the score is the value over the median (0.69 there), and a faster outlier scores 1.0,
a good report. Megatron only reports them; goodput's threshold and count decide. A rank is a
straggler after `consecutive` reports below `threshold` in a row; one good report resets it. The
line is the job's text: JSON is bounded (size, nesting), every field is checked, and a node named
here is evidence only until Slurm confirms it belongs to the job (attribution vouches for it).
"""

from __future__ import annotations

import json
import math
from typing import Any

import re2
from pydantic import Field

from goodput.identifiers import validate_node_name
from goodput.models import Frozen

MARKER = "goodput:straggler "
MAX_REPORT_CHARS = 1024
MAX_RANK = 2**31 - 1
_NVRX_TEXT = re2.compile(r"STRAGGLER DETECTION WARNING.{0,400}?\bRank[=:]\s?(\d{1,10})\b"
                         r"(?:.{0,200}?\bNode[=:]\s?([A-Za-z0-9][A-Za-z0-9._-]{0,63}))?"
                         r".{0,200}?\bScore[=:]\s?([0-9]{1,3}(?:\.[0-9]{1,9})?)")
_MEGATRON_OUTLIER = re2.compile(r"\bOUTLIER rank (\d{1,10})(?: \(([A-Za-z0-9][A-Za-z0-9._-]{0,63})\))?: "
                                r"-?[0-9]{1,12}(?:\.[0-9]{1,6})? \(([+-][0-9]{1,6}(?:\.[0-9]{1,3})?)%\)")
_FIELDS = frozenset({"rank", "node", "score", "section"})


class StragglerReportError(ValueError):
    """A `goodput:straggler` line that does not say what the format requires; the message says why."""


class StragglerReport(Frozen):
    rank: int = Field(ge=0, le=MAX_RANK)
    node: str | None = None
    score: float = Field(ge=0.0, le=1.0)
    section: str = Field(default="", max_length=64)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StragglerReportError(f"{what} must be a finite number")
    return float(value)


def _report(data: Any) -> StragglerReport:
    if not isinstance(data, dict):
        raise StragglerReportError("a straggler report is a JSON object")
    unknown = set(data) - _FIELDS
    if unknown:
        raise StragglerReportError(f"unknown field(s): {', '.join(sorted(str(k)[:20] for k in unknown)[:4])}")
    rank = data.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= MAX_RANK:
        raise StragglerReportError("rank must be an integer from 0 to 2**31-1")
    score = _number(data.get("score"), "score")
    if not 0.0 <= score <= 1.0:
        raise StragglerReportError("score must lie between 0 and 1 (1.0: as fast as the best rank)")
    node = data.get("node")
    if node is not None:
        if not isinstance(node, str):
            raise StragglerReportError("node must be a string")
        try:
            validate_node_name(node)
        except ValueError as error:
            raise StragglerReportError(f"node: {error}") from None
    section = data.get("section", "")
    if not isinstance(section, str) or len(section) > 64 or not section.isprintable():
        raise StragglerReportError("section must be a printable string of at most 64 characters")
    return StragglerReport(rank=rank, node=node, score=score, section=section)


def parse_report(text: str) -> StragglerReport | None:
    """The report a line carries (after an optional `srun -l` label), None when it carries none.
    Raises StragglerReportError for a marked line that is malformed."""
    at = text.find(MARKER, 0, 80)
    if at >= 0:
        body = text[at + len(MARKER):].strip()
        if len(body) > MAX_REPORT_CHARS:
            raise StragglerReportError(f"a straggler report is at most {MAX_REPORT_CHARS} characters")
        if body.count("{") + body.count("[") > 2:
            raise StragglerReportError("a straggler report is one flat JSON object")
        try:
            data = json.loads(body)
        except ValueError as error:
            raise StragglerReportError(f"not JSON ({str(error)[:60]})") from None
        return _report(data)
    if "OUTLIER rank " in text:
        return _megatron_outlier(text)
    if "STRAGGLER DETECTION WARNING" not in text:
        return None
    match = _NVRX_TEXT.search(text[:4096])
    if match is None:
        return None
    node = match.group(2)
    fields: dict[str, Any] = {"rank": int(match.group(1)), "score": float(match.group(3))}
    if node:
        fields["node"] = node
    return _report(fields)


def _megatron_outlier(text: str) -> StragglerReport | None:
    """A Megatron sniff-test outlier as a report: its value over the median, a faster one 1.0."""
    match = _MEGATRON_OUTLIER.search(text[:4096])
    if match is None:
        return None
    deviation = float(match.group(3)) / 100
    fields: dict[str, Any] = {"rank": int(match.group(1)), "score": min(1.0, max(0.0, 1.0 + deviation))}
    if match.group(2):
        fields["node"] = match.group(2)
    return _report(fields)


class ReportTally(Frozen):
    """Consecutive low scores per rank (a good report resets the rank), and the last node each
    rank reported."""

    low: dict[int, int] = Field(default_factory=dict)
    nodes: dict[int, str] = Field(default_factory=dict)


MAX_TRACKED_RANKS = 10_000


def observe(tally: ReportTally, report: StragglerReport, threshold: float,
            consecutive: int) -> tuple[ReportTally, bool]:
    """The tally after one report, and whether its rank just became a straggler."""
    low = dict(tally.low)
    nodes = dict(tally.nodes)
    if report.rank not in low and len(low) >= MAX_TRACKED_RANKS:
        return tally, False
    low[report.rank] = low.get(report.rank, 0) + 1 if report.score < threshold else 0
    if report.node:
        nodes[report.rank] = report.node
    return ReportTally(low=low, nodes=nodes), low[report.rank] == consecutive
