"""Parsing a pushed body into per-stream lines; every bad record rejected on its own.

A record is rejected alone, with its reason, never its batch: one that is not an object, lacks a
field, names an impossible job id, or carries a number no parser should be fed (JSON integers
are read with a digit bound, and a message holding a run of `MAX_NUMBER_DIGITS` digits or more is
refused: Python cannot convert such a number, and no log line legitimately prints one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from goodput.detect.logtail import TRUNCATION_MARKER, split_srun_label
from goodput.detect.push.config import MAX_ATTEMPT, PushConfig
from goodput.diagnose.provenance import PushedPathError, check_pushed_path
from goodput.identifiers import InvalidIdentifierError, validate_cluster, validate_job_id, validate_node_name
from goodput.models import IncidentKey
from goodput.untrusted_text import LinearRegex, utf8

MAX_NUMBER_DIGITS = 999
MAX_JSON_INT_CHARS = 40  # far beyond any id, rank or attempt; longer integers are not converted
_LONG_NUMBER = LinearRegex(f"[0-9]{{{MAX_NUMBER_DIGITS + 1}}}")


class PushBodyError(ValueError):
    """The body as a whole is unusable (not JSON at all, or larger than allowed)."""


class BodyTooLargeError(PushBodyError):
    """Larger than `max_body_bytes`: HTTP 413."""


@dataclass(frozen=True, slots=True)
class StreamKey:
    """One pushed log stream: the lines of one job attempt from one host and one file.

    The file is part of the key so that lines from a file that is not the job's output (another
    user's, named like it) never share a detector, or an anomaly, with the job's own lines.
    """

    cluster: str
    job_id: str
    attempt: int
    host: str | None
    file: str = ""

    @property
    def incident_key(self) -> IncidentKey:
        return IncidentKey(cluster=self.cluster, job_id=self.job_id, job_attempt=self.attempt)

    @property
    def path(self) -> str:
        base = f"push://{self.host or ''}/{self.job_id}"
        return f"{base}:{self.file}" if self.file else base


@dataclass(frozen=True, slots=True)
class PushLine:
    text: str
    rank: int | None = None
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Rejection:
    line: int
    """1-based line of the body; for a body that is one JSON array, the element's position."""
    reason: str


@dataclass(frozen=True, slots=True)
class ParsedBatch:
    received_at: datetime
    streams: Mapping[StreamKey, tuple[PushLine, ...]]
    fingerprints: Mapping[StreamKey, str]
    """A digest of each stream's records in this batch: a shipper's retry has the same one."""
    accepted: int
    rejected: tuple[Rejection, ...]
    """The first `max_rejections` rejections; `rejected_total` counts them all."""
    rejected_total: int
    records: Mapping[StreamKey, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    """The body line (or array position) of each accepted record, per stream."""


class _Reject(Exception):
    """One record is unusable; control flow inside the parser, never raised out of it."""


@dataclass(frozen=True, slots=True)
class OversizedNumber:
    """A JSON integer too long to convert, kept as its length so the record can be judged alone."""

    chars: int

    def __repr__(self) -> str:
        return f"a {self.chars}-character number"


def _json_int(text: str) -> int | OversizedNumber:
    return int(text) if len(text) <= MAX_JSON_INT_CHARS else OversizedNumber(len(text))


def _lines_of(text: str) -> Iterator[str]:
    """The non-empty lines of `text`, lazily: a 4 MiB record may be 2M short lines."""
    start, end = 0, len(text)
    while start < end:
        newline = text.find("\n", start)
        stop = end if newline < 0 else newline
        if stop > start:
            yield text[start:stop]
        start = stop + 1


def _lookup(record: Mapping[str, Any], names: Sequence[str]) -> tuple[str, Any] | None:
    for name in names:
        if name in record:
            return name, record[name]
        if "." in name:
            value: Any = record
            for part in name.split("."):
                if not isinstance(value, dict) or part not in value:
                    break
                value = value[part]
            else:
                return name, value
    return None


def _text_field(record: Mapping[str, Any], names: Sequence[str], what: str) -> str | None:
    found = _lookup(record, names)
    if found is None or found[1] is None:
        return None
    name, value = found
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise _Reject(f"{what} field {name!r} must be a string, got {_kind(value)}")
    return value  # its length and characters are checked by goodput.identifiers


def _int_field(record: Mapping[str, Any], names: Sequence[str], what: str) -> int | None:
    found = _lookup(record, names)
    if found is None or found[1] is None:
        return None
    name, value = found
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_ATTEMPT:
        shown = _kind(value) if isinstance(value, dict | list | OversizedNumber) else repr(value)[:40]
        raise _Reject(f"{what} field {name!r} must be a non-negative integer, got {shown}")
    return value


def _kind(value: object) -> str:
    if isinstance(value, OversizedNumber):
        return repr(value)
    return {dict: "an object", list: "an array", bool: "a boolean", float: "a number"}.get(
        type(value), type(value).__name__)


class _Parser:
    def __init__(self, config: PushConfig, cluster: str) -> None:
        self.config = config
        self.fields = config.fields
        self.cluster = cluster
        self.streams: dict[StreamKey, list[PushLine]] = {}
        self.raw: dict[StreamKey, list[str]] = {}
        self.lines_of: dict[StreamKey, list[int]] = {}
        self.accepted = 0
        self.seen = 0
        self.lines = 0
        self.limit_reported = False
        self.rejected: list[Rejection] = []
        self.rejected_total = 0

    def reject(self, line: int, reason: str) -> None:
        self.rejected_total += 1
        if len(self.rejected) < self.config.max_rejections:
            self.rejected.append(Rejection(line=line, reason=reason))

    def add(self, line: int, record: object, raw: str | None = None) -> None:
        """`raw` is the record's own text when the body had it (a line), else it is serialised."""
        if self.full:
            self.over_limit(line, 1)
            return
        self.seen += 1
        try:
            key, lines = self._record(record)
        except _Reject as err:
            self.reject(line, str(err))
            return
        self.lines += max(1, len(lines))
        self.streams.setdefault(key, []).extend(lines)
        self.raw.setdefault(key, []).append(raw if raw is not None else json.dumps(record, sort_keys=True,
                                                                                   default=repr))
        self.lines_of.setdefault(key, []).append(line)
        self.accepted += 1

    @property
    def full(self) -> bool:
        return self.seen >= self.config.max_lines_per_batch or self.lines >= self.config.max_lines_per_batch

    def over_limit(self, line: int, count: int) -> None:
        # One rejection says why; the rest are only counted, so a 1M-element array stays cheap.
        if not self.limit_reported:
            self.limit_reported = True
            self.reject(line, f"batch holds more than {self.config.max_lines_per_batch} records or lines; "
                              "this record and all after it were dropped, send smaller batches")
            count -= 1
        self.rejected_total += count

    def _record(self, record: object) -> tuple[StreamKey, list[PushLine]]:
        """The record's stream and lines, or `_Reject` saying what is wrong with it."""
        if not isinstance(record, dict):
            raise _Reject(f"expected a JSON object, got {_kind(record)}")
        f = self.fields
        message = _lookup(record, f.message)
        if message is None:
            raise _Reject(f"no message field (looked for {', '.join(f.message)})")
        if not isinstance(message[1], str):
            raise _Reject(f"message field {message[0]!r} must be a string, got {_kind(message[1])}")
        # Lone surrogates ("\ud800" is valid JSON) cannot be encoded later, in a Temporal payload.
        data = utf8(message[1])
        text = data.decode("utf-8")
        if (number := _LONG_NUMBER.search(data)) is not None:
            raise _Reject(f"message holds a number of more than {MAX_NUMBER_DIGITS} digits (at byte "
                          f"{number.start()}); no log line carries one, so it is not fed to the detectors")
        job_id = _text_field(record, f.job_id, "job id")
        if job_id is None:
            raise _Reject(f"no job id field (looked for {', '.join(f.job_id)})")
        host = _text_field(record, f.host, "host")
        cluster = _text_field(record, f.cluster, "cluster") or self.cluster
        file = _text_field(record, f.file, "file")
        try:
            key = StreamKey(cluster=validate_cluster(cluster), job_id=validate_job_id(job_id),
                            attempt=_int_field(record, f.attempt, "attempt") or 0,
                            host=validate_node_name(host) if host is not None else None,
                            file=check_pushed_path(file or ""))
        except (InvalidIdentifierError, PushedPathError) as err:
            raise _Reject(str(err)) from None
        # Actions go to the configured scheduler: an incident for a cluster it does not run is a mistake.
        if cluster != self.cluster and cluster not in self.config.clusters:
            raise _Reject(f"cluster {cluster!r} is not served here (this is {self.cluster!r})")
        rank = _int_field(record, f.rank, "rank")
        return key, self._lines(text, rank)

    def _lines(self, message: str, rank: int | None) -> list[PushLine]:
        # Multi-line records (a traceback joined by the shipper's multiline parser) become lines,
        # because the catalogue judges line by line, as it does for tailed files.
        limit, room = self.config.max_line_chars, self.config.max_lines_per_batch - self.lines
        out: list[PushLine] = []
        for line in _lines_of(message):
            if len(out) >= room:
                break  # the rest of a record longer than a whole batch may be is dropped
            text = line.removesuffix("\r")
            if not text:
                continue
            truncated = len(text) > limit
            if truncated:
                text = text[:limit] + TRUNCATION_MARKER
            line_rank = rank
            if rank is None and self.config.srun_labels:
                line_rank, text = split_srun_label(text)
            out.append(PushLine(text=text, rank=line_rank, truncated=truncated))
        return out

    def batch(self, received_at: datetime) -> ParsedBatch:
        fingerprints = {key: hashlib.sha256("\n".join(raw).encode("utf-8", errors="replace")).hexdigest()
                        for key, raw in self.raw.items()}
        return ParsedBatch(received_at=received_at, streams={k: tuple(v) for k, v in self.streams.items()},
                           fingerprints=fingerprints, accepted=self.accepted, rejected=tuple(self.rejected),
                           rejected_total=self.rejected_total,
                           records={k: tuple(v) for k, v in self.lines_of.items()})


def _loads(text: str) -> object:
    """json.loads, with deep nesting as ValueError; long integers become `OversizedNumber`s, so a
    record holding one is rejected alone instead of failing the array around it."""
    try:
        return json.loads(text, parse_int=_json_int)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def parse_batch(body: bytes, config: PushConfig, *, cluster: str, received_at: datetime) -> ParsedBatch:
    """Records grouped by stream, plus per-line rejections.

    Accepts JSON lines (one object per line; a line may also hold an array of objects) and a
    single JSON array (or object) spanning the whole body. Raises `PushBodyError` only when the
    body is larger than allowed or when no line of it is JSON at all.
    """
    if len(body) > config.max_body_bytes:
        raise BodyTooLargeError(f"body is {len(body)} bytes (limit {config.max_body_bytes})")
    text = body.decode("utf-8", errors="replace").removeprefix("\ufeff")
    parser = _Parser(config, validate_cluster(cluster))
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            whole = _loads(stripped)
        except ValueError:
            whole = None  # most often JSON lines ("Extra data" after the first object)
        if isinstance(whole, list):
            limit = config.max_lines_per_batch
            for index, record in enumerate(whole[:limit], start=1):
                parser.add(index, record)
            if len(whole) > limit:
                parser.over_limit(limit + 1, len(whole) - limit)
            return parser.batch(received_at)
        if isinstance(whole, dict):
            parser.add(1, whole, stripped)
            return parser.batch(received_at)
    first_error: str | None = None
    any_json = False
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        if parser.full:
            parser.over_limit(number, 1)
            continue
        try:
            value = _loads(line)
        except ValueError as err:
            detail = f"{err.msg} (column {err.colno})" if isinstance(err, json.JSONDecodeError) else str(err)
            reason = f"not JSON: {detail[:200]}"
            first_error = first_error or f"line {number}: {reason}"
            parser.reject(number, reason)
            continue
        any_json = True
        for record in value if isinstance(value, list) else (value,):
            parser.add(number, record, line if record is value else None)
    if not any_json and first_error is not None:
        raise PushBodyError(f"body is not JSON lines or a JSON array; {first_error}")
    return parser.batch(received_at)
