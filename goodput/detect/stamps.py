"""When a log line says it was written: its own leading ISO 8601 time stamp, if it has a zone.

Detection latency is measured from when a fault became observable. A line that carries its own
time (Python logging with `%(asctime)s` in UTC, NVRx, many launchers: `2026-12-01T09:00:00.123Z`,
`2026-12-01 09:00:00+00:00`) says that best; a stamp without a zone is the node's local time,
unknowable here, so it is not used (the file's write time is, see goodput.detect.logtail). The
text is the job's: a stamp is believed only inside the window the caller gives (no later than
the line was read, no earlier than the caller's horizon), and parsing is linear (RE2).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import re2

# An optional `srun -l` label, then the stamp at the start of the line.
_STAMP = re2.compile(r"^\s{0,8}(?:\d{1,9}:\s?)?\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})"
                     r"(?:[.,](\d{1,9}))?\s?(Z|[+-]\d{2}:?\d{2})")


def line_time(text: str, earliest: datetime, latest: datetime) -> datetime | None:
    """The line's own time when it has a zoned leading stamp between `earliest` and `latest`."""
    match = _STAMP.match(text[:80])
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = (match.group(7) or "0")[:6].ljust(6, "0")
    zone = match.group(8)
    try:
        tz = UTC if zone == "Z" else timezone((-1 if zone[0] == "-" else 1) * timedelta(
            hours=int(zone[1:3]), minutes=int(zone[-2:])))
        stamp = datetime(year, month, day, hour, minute, second, int(fraction), tzinfo=tz)
    except ValueError:  # month 13, hour 25, an offset of a day: not a time
        return None
    return stamp if earliest <= stamp <= latest else None
