"""PushRouter: one live detector per pushed stream, so pushed lines are judged like tailed ones."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from goodput.detect.hang import DEFAULT_HANG_CONFIG, HangConfig
from goodput.detect.live import LiveLogDetector
from goodput.detect.progress import ProgressParser
from goodput.logtail import LogLine
from goodput.models import Anomaly
from goodput.push.batch import ParsedBatch, PushLine, StreamKey
from goodput.push.config import PushConfig
from goodput.signatures import Catalogue, default_catalogue


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
        anomalies: list[Anomaly] = []
        for key, lines in batch.streams.items():
            stream = self._stream(key, batch.received_at)
            fingerprint = batch.fingerprints.get(key)
            if fingerprint is not None and fingerprint in stream.recent:
                stream.recent.move_to_end(fingerprint)
                anomalies.extend(stream.recent[fingerprint])
                continue
            found = tuple(stream.detector.feed(self._log_lines(key, stream, lines, batch.received_at),
                                               batch.received_at, detected_at))
            if fingerprint is not None:
                stream.recent[fingerprint] = found
                if len(stream.recent) > self.RECENT_BATCHES:
                    stream.recent.popitem(last=False)
            anomalies.extend(found)
        return anomalies

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

