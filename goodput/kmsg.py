"""`NVRM: Xid` lines from the kernel log, as `XidEvent`s.

The kernel log is the one Xid source that survives everything else failing: when a GPU falls off
the bus NVML may no longer answer and dcgm-exporter may be down, but the driver has already
written `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.` The parser accepts
that line wherever it sits: raw dmesg, `dmesg -T`, /dev/kmsg records, syslog's kern.log,
`journalctl` short/ISO output and `journalctl -o export` records. Pure: text in, events out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from goodput.gpu import XidEvent, normalize_pci_bus_id

_XID = re.compile(
    r"NVRM: Xid \((?P<pci>(?:PCI:)?[0-9A-Fa-f:.]+)\): (?P<code>\d+)"
    r"(?:, pid=(?P<pid>'<unknown>'|<unknown>|\d+))?"
    r"(?:, name=(?P<name>[^,]*))?"
    r"(?:, (?P<message>.*))?$")
# "2026-11-29T09:12:01.123456+00:00 node17 kernel: ..." (journalctl -o short-iso, rsyslog RFC3339)
_ISO_PREFIX = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s+"
    r"(?P<host>\S+)\s+kernel:")
# "Nov 29 09:12:01 node17 kernel: ..." (classic syslog: no year, so no timestamp is taken from it)
_SYSLOG_PREFIX = re.compile(r"^[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s+(?P<host>\S+)\s+kernel:")


def parse_xid_line(line: str, *, node: str | None = None,
                   observed_at: datetime | None = None) -> XidEvent | None:
    """The Xid in one log line, or None. A host/time in the line's prefix beats the defaults."""
    match = _XID.search(line.rstrip("\r\n"))
    if not match:
        return None
    host, when = node, observed_at
    if iso := _ISO_PREFIX.match(line):
        host = iso["host"]
        when = _parse_iso(iso["ts"]) or when
    elif syslog := _SYSLOG_PREFIX.match(line):
        host = syslog["host"]
    pid = match["pid"]
    name = (match["name"] or "").strip()
    return XidEvent(
        code=int(match["code"]), pci_bus_id=normalize_pci_bus_id(match["pci"]), node=host,
        pid=int(pid) if pid and pid.isdigit() else None,
        process=name if name and name != "<unknown>" else None,
        message=(match["message"] or "").strip(), source="kmsg", observed_at=when)


def _parse_iso(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


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
        when = None
        micros = record.get("__REALTIME_TIMESTAMP", "")
        if micros.isdigit():
            when = datetime.fromtimestamp(int(micros) / 1_000_000, tz=UTC)
        event = parse_xid_line(message, node=record.get("_HOSTNAME") or node, observed_at=when)
        if event is not None:
            events.append(event)
    return events
