"""`NVRM: Xid` lines from the kernel log, as `XidEvent`s.

The kernel log is the one Xid source that survives everything else failing: when a GPU falls off
the bus NVML may no longer answer and dcgm-exporter may be down, but the driver has already
written `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.` The parser accepts
that line wherever it sits: raw dmesg, `dmesg -T`, /dev/kmsg records, syslog's kern.log,
`journalctl` short/ISO output and `journalctl -o export` records. Pure: text in, events out.

Any process can get text into a kernel log path goodput reads (a journal export mixes in other
units, a syslog file other facilities), so lines are treated as hostile: patterns run on RE2
(linear time), lines are capped, numbers are bounded before conversion (an absurd Xid code or
pid makes the line not an Xid, or the pid unknown) and texts are clipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from goodput.detect.gpu import XidEvent, normalize_pci_bus_id
from goodput.untrusted_text import LinearRegex, bounded_int, utf8

MAX_LINE_CHARS = 64 * 1024
MAX_MESSAGE_CHARS = 1024
MAX_PROCESS_CHARS = 256
# Xid codes are three digits today; pids fit in ten.
MAX_XID_DIGITS = 6
MAX_PID_DIGITS = 10
# Microseconds since 1970 stay within 17 digits until the year 5138.
MAX_REALTIME_DIGITS = 17

_XID = LinearRegex(
    r"NVRM: Xid \((?P<pci>(?:PCI:)?[0-9A-Fa-f:.]{1,32})\): (?P<code>\d+)"
    r"(?:, pid=(?P<pid>'<unknown>'|<unknown>|\d+))?"
    r"(?:, name=(?P<name>[^,]*))?"
    r"(?:, (?P<message>.*))?$")
# "2026-11-29T09:12:01.123456+00:00 node17 kernel: ..." (journalctl -o short-iso, rsyslog RFC3339)
_ISO_PREFIX = LinearRegex(
    r"(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)\s+"
    r"(?P<host>\S{1,253})\s+kernel:")
# "Nov 29 09:12:01 node17 kernel: ..." (classic syslog: no year, so no timestamp is taken from it)
_SYSLOG_PREFIX = LinearRegex(r"[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s+(?P<host>\S{1,253})\s+kernel:")


def parse_xid_line(line: str, *, node: str | None = None,
                   observed_at: datetime | None = None) -> XidEvent | None:
    """The Xid in one log line, or None. A host/time in the line's prefix beats the defaults."""
    data = utf8(line[:MAX_LINE_CHARS].rstrip("\r\n"))
    match = _XID.search(data)
    if not match:
        return None
    code = bounded_int(match["code"], max_digits=MAX_XID_DIGITS)
    if code is None:
        return None
    host, when = node, observed_at
    if iso := _ISO_PREFIX.match(data):
        host = iso["host"]
        when = _parse_iso(iso["ts"] or "") or when
    elif syslog := _SYSLOG_PREFIX.match(data):
        host = syslog["host"]
    name = (match["name"] or "").strip()[:MAX_PROCESS_CHARS]
    return XidEvent(
        code=code, pci_bus_id=normalize_pci_bus_id(match["pci"] or ""), node=host,
        pid=bounded_int(match["pid"], max_digits=MAX_PID_DIGITS),
        process=name if name and name != "<unknown>" else None,
        message=(match["message"] or "").strip()[:MAX_MESSAGE_CHARS], source="kmsg", observed_at=when)


def _parse_iso(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def journal_realtime(micros: str) -> datetime | None:
    """A journal export's `__REALTIME_TIMESTAMP` (microseconds since 1970), or None if it is not one."""
    value = bounded_int(micros.strip(), max_digits=MAX_REALTIME_DIGITS)
    if value is None:
        return None
    try:
        return datetime.fromtimestamp(value / 1_000_000, tz=UTC)
    except (OverflowError, ValueError, OSError):  # beyond the platform's or datetime's range
        return None


def parse_xid_lines(lines: Iterable[str], *, node: str | None = None,
                    observed_at: datetime | None = None) -> list[XidEvent]:
    """Every Xid in a dmesg / kern.log / journalctl text dump."""
    return [event for line in lines
            if (event := parse_xid_line(line, node=node, observed_at=observed_at)) is not None]


def _export_records(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    record: dict[str, str] = {}
    for raw in lines:
        line = raw.rstrip("\n")
        if not line:
            if record:
                yield record
            record = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            record[key] = value
        # A field without "=" is the binary-safe encoding; Xid messages are plain text, so skip it.
    if record:
        yield record


def parse_journal_export(lines: Iterable[str], *, node: str | None = None) -> list[XidEvent]:
    """Xids in `journalctl -k -o export` output, with each record's host and realtime stamp."""
    events = []
    for record in _export_records(lines):
        message = record.get("MESSAGE", "")
        when = journal_realtime(record.get("__REALTIME_TIMESTAMP", ""))
        event = parse_xid_line(message, node=record.get("_HOSTNAME") or node, observed_at=when)
        if event is not None:
            events.append(event)
    return events
