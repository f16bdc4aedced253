"""Hostile job output against the catalogue matcher, `goodput classify`, the live watcher's detector,
progress and srun labels.

Every target takes any text a job can print. None of them has a documented error: they return,
always, with bounded results (no number of more than nine digits becomes a rank, no hit holds
more than the 64 KiB the matcher reads). The matcher must also agree with the old backtracking
engine on real lines, so the move to RE2 changed no verdict.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goodput.detect.live import LiveLogDetector
from goodput.detect.logtail import LogLine, split_srun_label
from goodput.detect.progress import ProgressParser
from goodput.detect.stamps import line_time
from goodput.detect.straggler_report import MARKER, StragglerReportError, parse_report
from goodput.diagnose.attribution import attribute
from goodput.diagnose.classify import classify_file, classify_lines, iter_lines, verdict_json
from goodput.diagnose.signatures import MAX_SCAN_CHARS, default_catalogue
from goodput.diagnose.signatures.matcher import batches
from goodput.diagnose.signatures.prefixes import RepeatedPrefix
from goodput.models import IncidentKey
from goodput.scheduler import JobInfo, JobState
from goodput.untrusted_text import utf8
from tests.fuzz.backtracking_reference import OldMatcher, new_match
from tests.fuzz.harness import rejects_cleanly
from tests.fuzz.log_strategies import PREFIXES, REAL_LINES, log_lines, mutated_line, numbers

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(900)]

CAT = default_catalogue()
IDS = {s.id for s in CAT.signatures}
OLD = OldMatcher(CAT)
PROGRESS = ProgressParser()
MAX_RANK = 10**9


@given(log_lines, st.integers(0, 2**40))
def test_match_line(line: str, line_no: int) -> None:
    hits = rejects_cleanly("log-line-match", lambda: CAT.match_line(line, line_no), ())
    assert hits is not None
    for m in hits:
        assert m.signature.id in IDS and m.line_no == line_no and len(m.text) <= MAX_SCAN_CHARS
        assert all(len(v) <= MAX_SCAN_CHARS for v in m.groups.values())
        assert m.rank is None or 0 <= m.rank < MAX_RANK
    assert not hits or CAT.might_match(line)


@given(st.lists(log_lines, max_size=40), st.integers(0, 2**40))
def test_scan_agrees_with_match_line(lines: list[str], start: int) -> None:
    scanned = rejects_cleanly("log-scan", lambda: list(CAT.scan(lines, start)), ())
    assert scanned is not None
    # Each line on its own, with the prefixes its batch repeats (which may name a host no known prefix
    # does); a batch whose lines hold newlines of their own is matched line by line, with none.
    one_by_one = [m for batch, text, first in batches(lines, start)
                  for layout in [_layout(batch, text)]
                  for n, line in enumerate(batch, first)
                  for m in CAT.match_line(line, n, layout)]
    assert scanned == one_by_one


def _layout(batch: list[str], text: str) -> RepeatedPrefix | None:
    data = utf8(text)
    return RepeatedPrefix(data) if data.count(b"\n") == len(batch) - 1 else None


def _log_bytes(lines: list[str], newline: str) -> bytes:
    return newline.join(lines).encode("utf-8", "surrogatepass")


log_files = st.one_of(
    st.builds(_log_bytes, st.lists(log_lines, max_size=30), st.sampled_from(["\n", "\r\n", "\n\n"])),
    st.binary(max_size=2_000),
    st.builds(lambda a, b: a + b, st.binary(max_size=200), st.sampled_from(REAL_LINES).map(str.encode)),
)


@given(data=log_files)
def test_classify_a_log_file(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz-job.log"  # one file, rewritten per example
    path.write_bytes(data)
    # The text path (what the live tailers feed) and `classify_file`'s byte path, which decodes hit lines only.
    for target, read in (("log-file-classify", lambda: classify_lines(iter_lines(io.BytesIO(data)))),
                         ("log-file-classify-bytes", lambda: classify_file(str(path)))):
        verdict = rejects_cleanly(target, read, ())
        assert verdict is not None
        assert verdict.rank is None or 0 <= verdict.rank < MAX_RANK
        assert len(verdict.evidence) <= 8 and all(len(e.text) <= 600 for e in verdict.evidence)
        json.dumps(verdict_json("job.log", verdict), ensure_ascii=False).encode("utf-8", "surrogatepass")


@given(mutated_line(ascii_only=True, max_repeat=3_000))
def test_matching_is_equivalent_to_the_old_engine(line: str) -> None:
    """RE2 and Python's `re` agree on real lines and their ASCII mutations (outside ASCII, `re`'s
    Unicode `\\d`, `\\w` and `\\s` differ from RE2's, on purpose: srun prints ASCII digits)."""
    found = rejects_cleanly("log-match-equivalence", lambda: new_match(CAT, line), ())
    assert found == OLD.match(line)


PROGRESS_TEMPLATES = [
    " iteration {a}/ {b} | consumed samples: {a} | elapsed time per iteration (ms): {c}.{a} |",
    "[titan] step: {a}  loss: {c}.5", "steps: {a} loss: 2.9 iter time (s): {c}", "[Rank {a}] step={b}, skipped={c}",
    "Epoch {a}:  12%|█▏   | {b}/{c} [22:17<2:42:51]", "global_step={a} loss={b}", " 41%|████  | {a}/{b} [41:02<59:03]",
    "saving checkpoint at iteration {a} to /ckpt", "successfully saved checkpoint from iteration {a} to /ckpt",
]
progress_lines = st.one_of(
    st.builds(lambda p, t, a, b, c: p + t.format(a=a, b=b, c=c), st.sampled_from(PREFIXES),
              st.sampled_from(PROGRESS_TEMPLATES), numbers, numbers, numbers),
    log_lines,
)


@given(progress_lines)
def test_progress_line(line: str) -> None:
    event = rejects_cleanly("progress-line", lambda: PROGRESS.parse(line), ())
    if event is not None:
        for value in (event.step, event.total, event.epoch):
            assert value is None or 0 <= value < 10**13
        assert event.step_time_s is None or 0 <= event.step_time_s <= 1e6
        assert event.rank is None or 0 <= event.rank < MAX_RANK


labels = st.one_of(
    st.builds(lambda pad, n, sep, rest: " " * pad + n + sep + rest, st.integers(0, 5), numbers,
              st.sampled_from([": ", ":", ":\n", " : "]), st.text(max_size=30)),
    st.text(max_size=60),
)


@given(labels)
def test_srun_label(text: str) -> None:
    split = rejects_cleanly("srun-label", lambda: split_srun_label(text), ())
    assert split is not None
    rank, rest = split
    if rank is None:
        assert rest == text
    else:
        assert 0 <= rank < 10**7 and text.endswith(rest)


NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
stamped_lines = st.one_of(
    log_lines,
    st.builds(lambda stamp, zone, rest: f"{stamp}{zone} {rest}",
              st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)).map(
                  lambda d: d.isoformat(sep="T")),
              st.sampled_from(["Z", "+00:00", "-13:59", "+99:99", "+0530", "", "z"]), log_lines),
    st.builds(lambda label, text: f"{label}: {text}", numbers, st.text(max_size=60)),
    # Stamps near the window, where a wrong comparison or zone would show.
    st.builds(lambda stamp, zone, rest: f"{stamp.isoformat(sep=' ')}{zone} {rest}",
              st.datetimes(min_value=datetime(2026, 12, 1, 7), max_value=datetime(2026, 12, 1, 10)),
              st.sampled_from(["Z", "+00:00", "+01:00", "-01:00", "+0100", ""]), st.text(max_size=20)),
)


@given(stamped_lines)
def test_line_time(line: str) -> None:
    """A job's line claims its own time: believed only inside the window, never a crash."""
    stamp = rejects_cleanly("log-line-time", lambda: line_time(line, NOW - timedelta(hours=1), NOW), ())
    assert stamp is None or NOW - timedelta(hours=1) <= stamp <= NOW


report_values = st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=80), st.none(), st.booleans(),
                          st.lists(st.integers(), max_size=3))
report_lines = st.one_of(
    st.dictionaries(st.sampled_from(["rank", "node", "score", "section", "x"]), report_values, max_size=5).map(
        lambda d: MARKER + json.dumps(d)),
    st.builds(lambda text: MARKER + text, st.text(max_size=200)),
    st.builds(lambda rank, node, score, junk:
              f"STRAGGLER DETECTION WARNING {junk} Rank={rank} Node={node} Score={score}",
              numbers, st.text(max_size=70), st.text(alphabet="0123456789.", max_size=12), st.text(max_size=40)),
    log_lines,
)


@given(report_lines)
def test_straggler_report(line: str) -> None:
    """A job's own straggler report: parsed strictly or refused with StragglerReportError."""
    parsed = rejects_cleanly("straggler-report", lambda: parse_report(line), (StragglerReportError,))
    assert parsed is None or 0.0 <= parsed.score <= 1.0


# A job's lines under a prefix it repeats (which may name a node: its own, or a victim's) or none.
prefixed_batches = st.one_of(
    st.lists(log_lines, max_size=40),
    st.builds(lambda name, bracketed, body: [(f"[{name}] " if bracketed else f"{name}: ") + line for line in body],
              st.one_of(st.sampled_from(["node-a12", "gpu7", "10.0.3.17", "victim-17"]), st.text(max_size=20)),
              st.booleans(), st.lists(log_lines, max_size=40)),
)
ALLOCATION = ("node-a12", "node2")


@given(prefixed_batches)
def test_live_detector_feed(texts: list[str]) -> None:
    """The live watcher on any batch of lines: at most a log anomaly and a straggler report, and no
    node outside the job's allocation is ever a culprit, whatever the lines name or repeat."""
    detector = LiveLogDetector.start(IncidentKey(cluster="lab", job_id="42", job_attempt=0), NOW)
    batch = [LogLine(path="/logs/42.out", offset=i * 100, line_no=i + 1, text=text, observed_at=NOW)
             for i, text in enumerate(texts)]
    found = rejects_cleanly("live-detector-feed", lambda: detector.feed(batch, NOW, NOW), ())
    assert found is not None and len(found) <= 2
    assert all(len(a.nodes) <= 1 and all(len(n) <= MAX_SCAN_CHARS for n in a.nodes) for a in found)
    if found:
        job = JobInfo(job_id="42", name="train", state=JobState.FAILED, nodes=ALLOCATION)
        assert set(attribute(found, job).culprit_nodes) <= set(ALLOCATION)
