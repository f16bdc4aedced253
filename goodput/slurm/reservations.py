"""Reading `scontrol show reservation -o NAME`: the hot-spare pool's nodes, users and flags.

A reservation record holds only what an administrator (or goodput) wrote: names, flags, times;
no job or user can put text into it. It is still read strictly: the record must be the
reservation that was asked for, each key once, and the node list a hostlist goodput can expand,
because goodput writes that list back when it refills the pool.
"""

from __future__ import annotations

from goodput.identifiers import validate_reservation
from goodput.scheduler import ReservationInfo, SchedulerError, UnknownReservationError
from goodput.slurm.hostlist import HostlistError, expand_hostlist

MAX_RECORD = 64 * 1024
NOTHING = frozenset({"", "(null)", "N/A", "n/a"})


class ReservationRecordError(SchedulerError):
    """The output is not one readable record of the reservation asked for."""


def _pairs(line: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for token in line.split(" "):
        if not token:
            continue
        key, eq, value = token.partition("=")
        if not eq or not key.isalnum():
            raise ReservationRecordError(f"unexpected token in reservation record: {token[:60]!r}")
        if key in pairs:
            raise ReservationRecordError(f"key {key} twice in reservation record")
        pairs[key] = value
    return pairs


def _names(value: str) -> tuple[str, ...]:
    return () if value in NOTHING else tuple(v for v in value.split(",") if v)


def parse_reservation(stdout: str, name: str) -> ReservationInfo:
    """One `scontrol show reservation -o NAME` line -> ReservationInfo."""
    validate_reservation(name)
    text = stdout[:MAX_RECORD].strip()
    if not text or text.lower().startswith(f"reservation {name.lower()} not found"):
        raise UnknownReservationError(f"reservation {name} not found")
    lines = text.splitlines()
    if len(lines) != 1:
        raise ReservationRecordError(f"expected one reservation record, got {len(lines)} lines")
    pairs = _pairs(lines[0])
    if pairs.get("ReservationName") != name:
        raise ReservationRecordError(f"record is not reservation {name}: {pairs.get('ReservationName', '')[:60]!r}")
    try:
        nodes = expand_hostlist("" if pairs.get("Nodes", "") in NOTHING else pairs["Nodes"])
    except HostlistError as err:
        raise ReservationRecordError(f"reservation {name}: unreadable node list: {err}") from err
    return ReservationInfo(name=name, nodes=nodes, users=_names(pairs.get("Users", "")),
                           flags=_names(pairs.get("Flags", "")))
