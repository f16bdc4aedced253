"""PushRouter: one live detector per pushed stream, so pushed lines are judged like tailed ones.

Streams are judged one by one and kept apart: should a detector ever fail on a stream's lines
(every parser below is bounded, so this is the last guard, not the plan), that stream's records
are reported as rejected and its detector is dropped, while every other job of the batch is
still judged. One job's output can never cost another job its anomalies.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from goodput.detect.hang import DEFAULT_HANG_CONFIG, HangConfig
from goodput.detect.live import LiveLogDetector
from goodput.detect.logtail import LogLine
from goodput.detect.progress import ProgressParser
from goodput.detect.push.batch import ParsedBatch, PushLine, Rejection, StreamKey
from goodput.detect.push.config import PushConfig
from goodput.diagnose.signatures import Catalogue, default_catalogue
from goodput.models import Anomaly, PushedFrom


@dataclass(frozen=True, slots=True)
class Routed:
    """What a batch produced: its anomalies, and the records of streams that could not be judged."""

    anomalies: list[Anomaly]
    rejected: list[Rejection] = field(default_factory=list)
    failures: list[tuple[StreamKey, Exception]] = field(default_factory=list)
    """The errors behind `rejected`, for the caller's log."""


@dataclass(slots=True)
class _Stream:
    detector: LiveLogDetector
    next_offset: int
    line_no: int = 0
    recent: OrderedDict[str, tuple[Anomaly, ...]] = field(default_factory=OrderedDict)


class PushRouter:
    """One live detector per stream, least recently used evicted beyond `max_streams`.

    Anomaly ids are digests of (job attempt, path, offset of the first decisive line), as for
    tailed files. Pushed lines have no file offset, so a stream numbers its lines with a counter
    that starts at the stream's creation time in microseconds: a stream re-created after an
    eviction or a restart keeps counting upwards and never reuses an id for a different line.
    A shipper's retry of a batch (same records, hence same fingerprint) gets the anomalies the
    first delivery produced, same ids, without feeding the detector twice.
    """

    RECENT_BATCHES = 32

    def __init__(self, config: PushConfig, *, catalogue: Catalogue | None = None,
                 hang: HangConfig = DEFAULT_HANG_CONFIG) -> None:
        self._max = config.max_streams
        self._catalogue = catalogue or default_catalogue()
        self._hang = hang
        self._progress = ProgressParser()  # stateless; shared so 10,000 streams compile nothing
        self._streams: OrderedDict[StreamKey, _Stream] = OrderedDict()

    def __len__(self) -> int:
        return len(self._streams)

    def route(self, batch: ParsedBatch, detected_at: datetime) -> list[Anomaly]:
        """The batch's anomalies; a stream that fails raises (see `route_each` to keep going)."""
        routed = self.route_each(batch, detected_at)
        if routed.failures:
            raise routed.failures[0][1]
        return routed.anomalies

    def route_each(self, batch: ParsedBatch, detected_at: datetime) -> Routed:
        """Every stream judged on its own; one that fails is rejected and the others go on."""
        routed = Routed(anomalies=[])
        for key, lines in batch.streams.items():
            try:
                routed.anomalies.extend(self._route_stream(key, lines, batch, detected_at))
            except Exception as err:  # isolation is the point: other jobs must not pay for this one
                self._streams.pop(key, None)  # its state may be half-updated; the next batch starts afresh
                routed.failures.append((key, err))
                reason = (f"job {key.job_id} attempt {key.attempt}: its lines could not be judged "
                          f"({type(err).__name__}) and were dropped")
                routed.rejected.extend(Rejection(line=n, reason=reason) for n in batch.records.get(key, (0,)))
        return routed

    def _route_stream(self, key: StreamKey, lines: Sequence[PushLine], batch: ParsedBatch,
                      detected_at: datetime) -> tuple[Anomaly, ...]:
        stream = self._stream(key, batch.received_at)
        fingerprint = batch.fingerprints.get(key)
        if fingerprint is not None and fingerprint in stream.recent:
            stream.recent.move_to_end(fingerprint)
            return stream.recent[fingerprint]
        # Every pushed anomaly says which file its record claimed, checked before anything acts on it.
        pushed = PushedFrom(file=key.file)
        found = tuple(a.model_copy(update={"pushed": pushed})
                      for a in stream.detector.feed(self._log_lines(key, stream, lines, batch.received_at),
                                                    batch.received_at, detected_at))
        if fingerprint is not None:
            stream.recent[fingerprint] = found
            if len(stream.recent) > self.RECENT_BATCHES:
                stream.recent.popitem(last=False)
        return found

    def _stream(self, key: StreamKey, now: datetime) -> _Stream:
        stream = self._streams.get(key)
        if stream is not None:
            self._streams.move_to_end(key)
            return stream
        detector = LiveLogDetector.start(key.incident_key, now, node=key.host, catalogue=self._catalogue,
                                         hang=self._hang, progress=self._progress)
        stream = self._streams[key] = _Stream(detector, next_offset=max(0, int(now.timestamp() * 1_000_000)))
        if len(self._streams) > self._max:
            self._streams.popitem(last=False)
        return stream

    @staticmethod
    def _log_lines(key: StreamKey, stream: _Stream, lines: Sequence[PushLine], now: datetime) -> list[LogLine]:
        path = key.path
        out: list[LogLine] = []
        for line in lines:
            stream.line_no += 1
            out.append(LogLine(path=path, offset=stream.next_offset, line_no=stream.line_no, rank=line.rank,
                               text=line.text, truncated=line.truncated, observed_at=now))
            stream.next_offset += 1
        return out

