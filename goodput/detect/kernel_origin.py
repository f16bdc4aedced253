"""Which kernel-log records the node agent may believe: only those the kernel wrote (issue #26).

An `NVRM: Xid` line drains a node and requeues every opted-in job on it, and the files a kernel
log is read from may hold anyone's text: /var/log/messages (RHEL) and /var/log/syslog (Debian)
take every facility, a journal export without `-k` takes every unit, and a local account's
`logger 'NVRM: Xid ... 79 ...'` lands in any of them looking like the driver's line. So a record
counts only where its kernel origin is structural:

* a journal export record with `_TRANSPORT=kernel`: journald sets that trusted field itself; a
  sender chooses SYSLOG_IDENTIFIER (`logger -t kernel`) but never `_TRANSPORT`;
* a /dev/kmsg record (`PRI,SEQ,USEC,FLAGS;text`) or `dmesg -r` line (`<PRI>text`) of facility 0,
  which the kernel never gives a record written from user space;
* a `dmesg` line (`[ 8812.221004] text`, `dmesg -T`): a dump of the kernel's ring buffer;
* a syslog line tagged `kernel:`, in a file that only the kernel's facility feeds.

The last is the weak one: a syslog file is kernel-only by the daemon's configuration, not by its
content, and `logger -t kernel` writes a perfect `kernel:` line into a mixed file. So a line with
another tag marks the file as mixing facilities, and from then on its `kernel:` lines are not
believed either (unless the operator accepted the risk: `agent.kernel_log_accept_mixed`);
`survey` lets the agent refuse such a file at start and `goodput doctor` say so, and the paths
that always mix (/var/log/messages, /var/log/syslog) are refused by name. A kernel record is also
believed only when its message *starts* with `NVRM: Xid`: some kernel messages quote user text
(a process name, an audit field). Pure: lines in, verdicts and events out; RE2 patterns, bounded.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from goodput.detect.gpu import XidEvent
from goodput.detect.kmsg import MAX_LINE_CHARS, journal_realtime, parse_xid_line
from goodput.models import Frozen
from goodput.untrusted_text import LinearRegex, bounded_int, utf8

XID_START = "NVRM: Xid "
# Files every facility feeds on the distributions goodput supports: never kernel-only.
ALWAYS_MIXED = frozenset({"/var/log/messages", "/var/log/syslog", "/var/log/daemon.log", "/var/log/user.log",
                          "/var/log/debug"})
MAX_RECORD_FIELDS = 256
SURVEY_BYTES = 256 * 1024
_KEPT_FIELDS = ("MESSAGE", "_TRANSPORT", "__REALTIME_TIMESTAMP", "_HOSTNAME")

_EXPORT_FIELD = LinearRegex(r"^(?P<key>[A-Z_][A-Z0-9_]{0,63})=(?P<value>.*)$")
_KMSG = LinearRegex(r"^(?P<pri>\d{1,4}),\d{1,20},\d{1,20},[^;]{0,16};(?P<msg>.*)$")
_RAW_PRI = LinearRegex(r"^<(?P<pri>\d{1,4})>(?P<msg>.*)$")
_DMESG = LinearRegex(r"^\[[^\]]{1,40}\] ?(?P<msg>.*)$")
_SYSLOG = LinearRegex(
    r"^(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2})"
    r"\s+\S{1,253}\s+(?P<tag>[^\s:\[]{1,128})(?:\[[^\]]{0,20}\])?: ?(?P<msg>.*)$")


class Origin(StrEnum):
    KERNEL = "kernel"
    """Structurally the kernel's (kmsg/dmesg), or a `kernel:` syslog line (believed in a kernel-only file)."""
    TAGGED_KERNEL = "tagged-kernel"
    """A syslog line tagged `kernel:`: the kernel's only if no other facility feeds the file."""
    OTHER = "other"
    """Another facility or program: the file mixes facilities."""
    UNKNOWN = "unknown"


class KernelLogRefusedError(ValueError):
    """The configured kernel log mixes facilities: any local account could forge an Xid in it."""


def text_origin(line: str) -> tuple[Origin, str]:
    """A text line's origin and its message (the part after the kernel's or syslog's prefix)."""
    text = line[:MAX_LINE_CHARS].rstrip("\r\n")
    data = utf8(text)
    if match := _KMSG.match(data):
        return _by_facility(match["pri"], match["msg"] or "")
    if match := _RAW_PRI.match(data):
        return _by_facility(match["pri"], _without_stamp(match["msg"] or ""))
    if match := _DMESG.match(data):
        return Origin.KERNEL, match["msg"] or ""
    if match := _SYSLOG.match(data):
        message = _without_stamp(match["msg"] or "")
        return (Origin.TAGGED_KERNEL if match["tag"] == "kernel" else Origin.OTHER), message
    return Origin.UNKNOWN, text


def _by_facility(pri: str | None, message: str) -> tuple[Origin, str]:
    value = bounded_int(pri, max_digits=4)
    return (Origin.KERNEL if value is not None and value >> 3 == 0 else Origin.OTHER), message


def _without_stamp(message: str) -> str:
    """`kernel: [ 8812.221004] NVRM: ...`: the kernel's own time stamp, kept by some daemons."""
    match = _DMESG.match_text(message)
    return (match["msg"] or "") if match else message


class KernelReader:
    """Xid events from a kernel log's lines, believing only kernel-origin records.

    Text lines and journal export records may alternate in one file (a file written by
    `journalctl -k -f -o export`, or a plain kern.log); export fields are collected per record
    (up to a blank line) because `_TRANSPORT` may come after `MESSAGE`.
    """

    def __init__(self, node: str | None, *, accept_mixed: bool = False) -> None:
        self._node = node
        self._accept_mixed = accept_mixed
        self._record: dict[str, str] = {}
        self._fields = 0
        self._line_time: datetime | None = None
        self.mixed = False
        """A line of another facility was seen: `kernel:` lines of this file prove nothing."""
        self.untrusted = 0
        """Xid-looking records not believed (not the kernel's, or in a file that mixes facilities)."""

    @property
    def in_record(self) -> bool:
        """An export record is open (fields read, no blank line yet)."""
        return self._fields > 0

    def feed(self, line: str, observed_at: datetime | None) -> XidEvent | None:
        text = line[:MAX_LINE_CHARS].rstrip("\r\n")
        if not text:
            return self._end_record()
        if field := _EXPORT_FIELD.match_text(text):
            key = field["key"] or ""
            if not self._record and not self._fields:
                self._line_time = observed_at
            self._fields += 1
            if key in _KEPT_FIELDS and self._fields <= MAX_RECORD_FIELDS:
                self._record[key] = field["value"] or ""
            return None
        origin, message = text_origin(text)
        if origin is Origin.OTHER:
            self.mixed = True
        if XID_START not in message:
            return None
        believed = message.startswith(XID_START) and (
            origin is Origin.KERNEL or (origin is Origin.TAGGED_KERNEL and (self._accept_mixed or not self.mixed)))
        if not believed:
            self.untrusted += 1
            return None
        return parse_xid_line(text, node=self._node, observed_at=observed_at)

    def _end_record(self) -> XidEvent | None:
        record, when, self._record, self._fields, self._line_time = self._record, self._line_time, {}, 0, None
        message = record.get("MESSAGE", "")
        if XID_START not in message:
            return None
        if record.get("_TRANSPORT") != "kernel" or not message.startswith(XID_START):
            self.untrusted += 1
            return None
        stamp = journal_realtime(record.get("__REALTIME_TIMESTAMP", ""))
        return parse_xid_line(message, node=record.get("_HOSTNAME") or self._node, observed_at=stamp or when)


class KernelLogSurvey(Frozen):
    """What the tail of a kernel-log file says about its origin (`goodput doctor`, the agent's start)."""

    path: str
    exists: bool = True
    kernel_lines: int = 0
    """Kernel by structure: /dev/kmsg records, dmesg lines."""
    tagged_lines: int = 0
    """Syslog lines tagged `kernel:`: the kernel's only if nothing else feeds the file."""
    other_lines: int = 0
    kernel_records: int = 0
    other_records: int = 0
    other_tags: tuple[str, ...] = ()
    always_mixed: bool = False

    @property
    def mixed(self) -> bool:
        return self.always_mixed or self.other_lines > 0

    @property
    def by_configuration(self) -> bool:
        """Kernel-only as far as its lines show, but only the syslog daemon's configuration makes it so."""
        return not self.mixed and self.tagged_lines > 0

    def describe(self) -> str:
        if self.always_mixed:
            return f"{self.path} is fed by every syslog facility: any local account can write an Xid line into it"
        if self.other_lines:
            return (f"{self.path} mixes facilities ({self.other_lines} of its last lines come from "
                    f"{', '.join(self.other_tags) or 'other programs'}): any local account can write an Xid line "
                    "into it (`logger -t kernel`)")
        if not self.exists:
            return f"{self.path} does not exist yet"
        if self.other_records or self.kernel_records:
            return (f"{self.path}: journal export, only records with _TRANSPORT=kernel count "
                    f"({self.kernel_records} kernel, {self.other_records} other of the last records)")
        if self.tagged_lines:
            return (f"{self.path}: {self.tagged_lines} syslog line(s) tagged kernel of the last ones, no other "
                    "facility seen")
        return f"{self.path}: {self.kernel_lines} kernel record(s) of the last ones, no other facility seen"


def survey_lines(path: Path, lines: Iterable[str]) -> KernelLogSurvey:
    """Classify a file's last lines; `path` names it (and may be one that always mixes)."""
    kernel = tagged = other = kernel_records = other_records = 0
    tags: list[str] = []
    transport: str | None = None
    in_record = False
    for line in lines:
        text = line.rstrip("\r\n")
        if not text:
            if in_record:
                kernel_records, other_records = ((kernel_records + 1, other_records) if transport == "kernel"
                                                 else (kernel_records, other_records + 1))
            in_record, transport = False, None
            continue
        if field := _EXPORT_FIELD.match_text(text[:MAX_LINE_CHARS]):
            in_record = True
            if field["key"] == "_TRANSPORT":
                transport = field["value"]
            continue
        origin, _ = text_origin(text)
        if origin is Origin.OTHER:
            other += 1
            tag = _SYSLOG.match(utf8(text[:MAX_LINE_CHARS]))
            name = (tag["tag"] or "")[:40] if tag else "a non-kernel facility"
            if name not in tags and len(tags) < 5:
                tags.append(name)
        elif origin is Origin.KERNEL:
            kernel += 1
        elif origin is Origin.TAGGED_KERNEL:
            tagged += 1
    return KernelLogSurvey(path=str(path), kernel_lines=kernel, tagged_lines=tagged, other_lines=other,
                           kernel_records=kernel_records, other_records=other_records, other_tags=tuple(tags),
                           always_mixed=str(path) in ALWAYS_MIXED)


def read_tail(path: Path, limit: int = SURVEY_BYTES) -> list[str]:
    """The last `limit` bytes of `path` as lines (the first, likely cut, dropped). Regular files
    only, opened without blocking: a FIFO would block the open itself, a device never end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KernelLogRefusedError(f"{path} is not a regular file")
        start = max(0, info.st_size - limit)
        data = os.pread(fd, limit, start)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").split("\n")
    return lines[1:] if start > 0 else lines


def survey_kernel_log(path: Path) -> KernelLogSurvey:
    """A file that does not exist yet (a journal export started after the agent) has nothing to say
    but its name."""
    if not path.exists():
        return KernelLogSurvey(path=str(path), exists=False, always_mixed=str(path) in ALWAYS_MIXED)
    return survey_lines(path, read_tail(path))


MIXED_FIX = ("read kernel records only: `journalctl -k -f -o export` into a file (only _TRANSPORT=kernel records "
             "count), or a kern.log only the kernel facility feeds (rsyslog `kern.* /var/log/kern.log`)")


def check_kernel_log(path: Path, *, accept_mixed: bool) -> KernelLogSurvey:
    """The agent's start: refuse a file that mixes facilities unless the operator accepted it."""
    survey = survey_kernel_log(path)
    if survey.mixed and not accept_mixed:
        raise KernelLogRefusedError(f"refusing kernel log {survey.describe()}. To fix, {MIXED_FIX}; or set "
                                    "agent.kernel_log_accept_mixed = true to accept that risk")
    return survey
