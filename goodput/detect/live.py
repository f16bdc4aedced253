"""The live log detector of one job attempt: tailed lines in, anomalies out.

The same catalogue and verdict code as `goodput classify`, applied batch by batch to what the
tailer returns (a host no known prefix names inferred, as there, from the prefixes a stretch of the
batch repeats), plus the progress/hang detector. Pure apart from the state it folds: time is
passed in, and anomaly ids are digests of the job attempt and the batch's first decisive line
(file, byte offset, text). A watcher that restarts from an older cursor re-reads lines whose anomaly already
went out; it is told where they end (goodput.detect.log_marks) and matches only what lies past
them, so the old lines are not sent again and the new ones are not mistaken for a repeat.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta

from pydantic import Field

from goodput.detect.hang import DEFAULT_HANG_CONFIG, HangConfig, ProgressState, assess_hang, hang_anomaly
from goodput.detect.log_marks import Replay, marks_of, sort_out
from goodput.detect.logtail import LogLine
from goodput.detect.progress import ProgressParser
from goodput.detect.stamps import line_time
from goodput.detect.straggler import DEFAULT_STRAGGLER_CONFIG, StragglerConfig
from goodput.detect.straggler_case import straggler_anomaly_from_cases, straggler_cases
from goodput.detect.straggler_report import ReportTally, StragglerReportError, observe, parse_report
from goodput.diagnose.classify import anomaly_from_verdict
from goodput.diagnose.signatures import MAX_SCAN_CHARS, Catalogue, default_catalogue
from goodput.diagnose.signatures.model import Match, Role
from goodput.diagnose.signatures.prefixes import RepeatedPrefix
from goodput.diagnose.signatures.verdict import VerdictBuilder
from goodput.models import Anomaly, AnomalyKind, AnomalySource, Category, Frozen, IncidentKey, RestartEffect

_DECISIVE = (Role.ROOT, Role.KNOCK_ON)


class LiveState(Frozen):
    """What a watcher must carry across restarts besides its file cursors."""

    progress: ProgressState
    hang_reported: bool = False
    anomalies: int = Field(default=0, ge=0)
    # Recent step times per rank (bounded by the straggler window) and where each rank runs.
    rank_steps: dict[int, tuple[float, ...]] = Field(default_factory=dict)
    rank_hosts: dict[int, str] = Field(default_factory=dict)
    straggler_reported: bool = False
    straggler_reports: ReportTally = Field(default_factory=ReportTally)
    # After a resume: lines read again whose anomaly the incident already has.
    replays: tuple[Replay, ...] = ()


def anomaly_id(key: IncidentKey, *parts: object) -> str:
    digest = hashlib.sha256("\0".join(map(str, (key.cluster, key.job_id, key.job_attempt, *parts))).encode())
    return f"log-{digest.hexdigest()[:20]}"


def _identity(line: LogLine) -> tuple[object, ...]:
    """Names a line the same however often it is read, and no other line: a tailed file by inode
    (a rotated file is read on under another name; a new file takes the old name and offsets) and
    text (a truncated file reuses offsets); pushed lines by stream path and counter."""
    if line.inode is None:
        return line.path, line.offset
    return "file", line.device, line.inode, line.offset, line.text


# How far before the read a line's own time stamp is believed (the text is the job's).
STAMP_HORIZON = timedelta(hours=1)


def observable_at(line: LogLine, polled_at: datetime) -> datetime:
    """When the fault a line reports became observable: its own zoned time stamp, else when the
    file was last written before it was read, else when it was read."""
    written = line.written_at or polled_at
    return line_time(line.text, polled_at - STAMP_HORIZON, written) or written


# Lines per layout window, by their length: about the piece `classify_file` reads at a time.
LAYOUT_WINDOW_CHARS = 32 * 1024


def _layouts(lines: Sequence[LogLine]) -> Iterator[RepeatedPrefix | None]:
    """For each line, the layout of its window of the batch: the prefixes that window repeats name
    a host no known prefix does, as they do for `goodput classify` on the same stretch of log. Only
    nodes of the job's allocation are ever implicated (`attribution.vouched_nodes`)."""
    start, size = 0, 0
    for end, line in enumerate(lines):
        size += min(len(line.text), MAX_SCAN_CHARS) + 1
        if size >= LAYOUT_WINDOW_CHARS or end == len(lines) - 1:
            window = lines[start:end + 1]
            layout = RepeatedPrefix.of_lines([w.text[:MAX_SCAN_CHARS] for w in window])  # as matched
            yield from (layout for _ in window)
            start, size = end + 1, 0


class LiveLogDetector:
    def __init__(self, key: IncidentKey, state: LiveState, *, node: str | None = None,
                 catalogue: Catalogue | None = None, hang: HangConfig = DEFAULT_HANG_CONFIG,
                 progress: ProgressParser | None = None,
                 straggler: StragglerConfig = DEFAULT_STRAGGLER_CONFIG) -> None:
        self.key = key
        self.state = state
        self._node = node
        self._catalogue = catalogue or default_catalogue()
        self._hang = hang
        self._progress = progress or ProgressParser()
        self._straggler = straggler

    @classmethod
    def start(cls, key: IncidentKey, started_at: datetime, **kwargs: object) -> LiveLogDetector:
        return cls(key, LiveState(progress=ProgressState(started_at=started_at)), **kwargs)  # type: ignore[arg-type]

    def feed(self, lines: Sequence[LogLine], observed_at: datetime, detected_at: datetime) -> list[Anomaly]:
        """One anomaly per batch that holds a cause or a consequence; progress folded in."""
        matches: list[Match] = []
        first: LogLine | None = None
        effect_line: LogLine | None = None
        found: list[Anomaly] = []
        progress = self.state.progress
        steps = dict(self.state.rank_steps)
        hosts = dict(self.state.rank_hosts)
        replays = self.state.replays
        # A one-node job's lines all come from its node: a name its lines repeat adds nothing.
        layouts = _layouts(lines) if self._node is None else [None] * len(lines)
        for line, layout in zip(lines, layouts, strict=True):
            sent, replays = sort_out(line, replays) if replays else (False, replays)
            event = self._progress.parse(line.text)
            if event is not None:
                progress = progress.observe(event, observed_at, self._hang)
                if event.rank is not None and event.step_time_s:
                    window = (*steps.get(event.rank, ()), event.step_time_s)[-self._straggler.window:]
                    steps[event.rank] = window
                    if event.host:
                        hosts[event.rank] = event.host
            # Straggler reports are named by rank alone: one read again dedupes in the incident.
            reported = self._straggler_report(line, observed_at, detected_at)
            if reported is not None:
                found.append(reported)
            for match in self._catalogue.match_line(line.text, line.line_no, layout):
                if match.signature.restart_effect is RestartEffect.IN_JOB:
                    progress = progress.restarted(observed_at)  # replayed steps are progress again
                if sent:
                    continue  # counted as progress again, but its anomaly went out before the resume
                # A launcher's in-job restart or give-up is not a failure line, but the incident
                # must hear of it: it decides whether goodput restarts the job at all.
                if match.signature.role in _DECISIVE:
                    first = first or line
                elif match.signature.restart_effect is not RestartEffect.NONE:
                    effect_line = effect_line or line
                matches.append(match)
        self.state = self.state.model_copy(update={"progress": progress, "rank_steps": steps, "rank_hosts": hosts,
                                                   "replays": replays})
        first = first or effect_line
        if first is None:
            return found
        verdict = VerdictBuilder(self._catalogue.version).add_all(matches).build()
        anomaly = anomaly_from_verdict(
            verdict, anomaly_id=anomaly_id(self.key, *_identity(first)), job_id=self.key.job_id,
            observed_at=observable_at(first, observed_at), detected_at=detected_at, cluster=self.key.cluster,
            job_attempt=self.key.job_attempt, host=self._node)
        self.state = self.state.model_copy(update={"anomalies": self.state.anomalies + 1})
        return [*found, self._with_progress(anomaly).model_copy(update={"log_marks": marks_of(lines)})]

    def _straggler_report(self, line: LogLine, observed_at: datetime, detected_at: datetime) -> Anomaly | None:
        """One straggler anomaly per attempt, when a rank's own reports say it lags."""
        try:
            report = parse_report(line.text)
        except StragglerReportError:
            return None  # a malformed report says nothing; the job's other lines still count
        if report is None:
            return None
        tally, lagging = observe(self.state.straggler_reports, report, self._straggler.report_threshold,
                                 self._straggler.report_consecutive)
        self.state = self.state.model_copy(update={"straggler_reports": tally})
        if not lagging or self.state.straggler_reported:
            return None
        node = tally.nodes.get(report.rank)
        where = f" on {node}" if node else ""
        section = f" in {report.section}" if report.section else ""
        why = (f"rank {report.rank}{where} reported a straggler score below {self._straggler.report_threshold:g} "
               f"{self._straggler.report_consecutive} times in a row (last {report.score:.2f}{section})")
        self.state = self.state.model_copy(update={"straggler_reported": True, "anomalies": self.state.anomalies + 1})
        return Anomaly(id=anomaly_id(self.key, "straggler-report", report.rank), source=AnomalySource.LOG,
                       kind=AnomalyKind.STRAGGLER, cluster=self.key.cluster, job_id=self.key.job_id,
                       job_attempt=self.key.job_attempt, nodes=(node,) if node else (), ranks=(report.rank,),
                       evidence=[why, line.text[:500]], category=Category.STRAGGLER,
                       observed_at=observable_at(line, observed_at), detected_at=detected_at)

    def _with_progress(self, anomaly: Anomaly) -> Anomaly:
        progress = self.state.progress
        step_time = statistics.median(progress.step_times) if progress.step_times else None
        return anomaly.model_copy(update={"progress_step": progress.last_step, "step_time_s": step_time})

    def tick(self, now: datetime) -> list[Anomaly]:
        """The slow checks: at most one hang and one straggler anomaly per job attempt."""
        return self._hang_check(now) + self._straggler_check(now)

    def _straggler_check(self, now: datetime) -> list[Anomaly]:
        if self.state.straggler_reported or len(self.state.rank_steps) < self._straggler.min_ranks:
            return []
        hosts = dict(self.state.rank_hosts)
        # The log watcher has no GPU samples: step times alone, with what they cost the job per hour.
        cases = straggler_cases(self.state.rank_steps, hosts, config=self._straggler)
        anomaly = straggler_anomaly_from_cases(cases, anomaly_id=anomaly_id(self.key, "straggler"),
                                               job_id=self.key.job_id, observed_at=now, detected_at=now,
                                               cluster=self.key.cluster, job_attempt=self.key.job_attempt)
        if anomaly is None:
            return []
        self.state = self.state.model_copy(update={"straggler_reported": True,
                                                   "anomalies": self.state.anomalies + 1})
        return [anomaly]

    def _hang_check(self, now: datetime) -> list[Anomaly]:
        if self.state.hang_reported:
            return []
        assessment = assess_hang(self.state.progress, now, self._hang)
        if not assessment.hung:
            return []
        self.state = self.state.model_copy(update={"hang_reported": True, "anomalies": self.state.anomalies + 1})
        hang = hang_anomaly(assessment, anomaly_id=anomaly_id(self.key, "hang"), job_id=self.key.job_id,
                            observed_at=now, detected_at=now, cluster=self.key.cluster,
                            job_attempt=self.key.job_attempt)
        return [self._with_progress(hang)]
