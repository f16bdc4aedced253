"""Bounded decoding of Slurm's JSON and typed readers for its values, whatever the release.

Every JSON reader of goodput (`squeue`/`sinfo`/`scontrol --json`, slurmrestd, the record that
resubmission rebuilds options from) goes through these: the document is decoded with numbers
limited to 20 digits, NaN and infinities refused and nesting bounded; errors Slurm reported inside
it fail the read; and each field is read by its type (a plain or `{"set", "infinite", "number"}`
wrapped number, text, a state or list of states, a hostlist, an id), so a value of the wrong type
is a SlurmJsonError with a message, never a TypeError, ValueError or RecursionError. What the
values mean for jobs and nodes is goodput.slurm.jsonout's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NoReturn

from goodput.scheduler import SchedulerError, TransientSchedulerError, UnknownJobError, UnknownNodeError
from goodput.slurm.errors import classify
from goodput.slurm.hostlist import HostlistError, expand_hostlist
from goodput.slurm.records import clean

MAX_DOCUMENT = 256 * 1024 * 1024
MAX_NUMBER = 20  # characters of one JSON number; Slurm's are at most 64-bit
MAX_LIST = 1024  # entries of a state list
MAX_ERRORS = 20


class SlurmJsonError(SchedulerError):
    """Output that is not the JSON a Slurm command prints."""


def fail(message: str) -> NoReturn:
    """Raise SlurmJsonError: every reader's one way to refuse a value."""
    raise SlurmJsonError(message)


def _bounded_int(literal: str) -> int:
    if len(literal) > MAX_NUMBER:
        fail(f"a number of {len(literal)} digits; Slurm prints at most {MAX_NUMBER}")
    return int(literal)


def _bounded_float(literal: str) -> float:
    value = float(literal) if len(literal) <= 2 * MAX_NUMBER else math.inf
    if not math.isfinite(value):
        fail(f"a number Slurm would not print: {literal[:40]}")
    return value


def _no_constant(name: str) -> NoReturn:
    fail(f"{name} is not a number Slurm prints")


def decode(text: str | bytes) -> Any:
    """Any JSON value, with bounded numbers; SlurmJsonError for everything that is not JSON."""
    if len(text) > MAX_DOCUMENT:
        fail(f"a JSON document of {len(text)} bytes (limit {MAX_DOCUMENT})")
    try:
        return json.loads(text, parse_int=_bounded_int, parse_float=_bounded_float,
                          parse_constant=_no_constant)
    except RecursionError:
        fail("JSON nested too deeply")
    except SlurmJsonError:
        raise
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes
        fail(f"not JSON: {str(exc)[:200]}")


def load(text: str | bytes) -> dict[str, Any]:
    """The document, or an error if Slurm reported one inside it.

    With slurmctld down, 22.05's `squeue --json` exits 0 and prints `"jobs": []` next to
    `"errors": [{"error": "Unspecified error", ...}]`: read naively, every job has vanished.
    Any reported error therefore fails the listing, as a retryable error unless it names a
    permanent cause.
    """
    document = decode(text)
    if not isinstance(document, dict):
        fail("expected a JSON object")
    problems = errors_in(document)
    if problems:
        error = classify(["slurm", "--json"], 1, "", "; ".join(problems))
        if isinstance(error, UnknownJobError | UnknownNodeError):
            raise error
        raise TransientSchedulerError(f"Slurm reported: {'; '.join(problems)[:500]}")
    return document


def _plain(value: Any) -> str:
    """A scalar as text; containers only by their type (never walked, never recursed into)."""
    if isinstance(value, str):
        return value[:500]
    if isinstance(value, int | float | bool) or value is None:
        return str(value)
    return f"<{type(value).__name__}>"


def errors_in(document: Mapping[str, Any]) -> list[str]:
    """The `errors` entries of a Slurm JSON document as text (22.05 and 23.02+ shapes)."""
    entries = document.get("errors")
    if entries is None:
        return []
    if not isinstance(entries, list):
        entries = [entries]
    found: list[str] = []
    for entry in entries[:MAX_ERRORS]:
        if isinstance(entry, Mapping):
            parts = [_plain(entry.get(k)) for k in ("source", "description", "error") if entry.get(k)]
            found.append(": ".join(parts) or "an error without a description")
        elif entry:
            found.append(_plain(entry))
    return found


def _version_part(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 <= value < 10_000:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 4:
        return int(value)
    return None


def slurm_release(document: Mapping[str, Any]) -> str:
    """`22.05.8` from `meta.Slurm.release` (22.05) or `meta.slurm.release` (23.02+); '' if absent."""
    meta = document.get("meta")
    if not isinstance(meta, Mapping):
        return ""
    for key in ("Slurm", "slurm"):
        block = meta.get(key)
        if isinstance(block, Mapping):
            release = block.get("release")
            if isinstance(release, str) and release:
                return release[:64]
            version = block.get("version")
            if isinstance(version, Mapping):
                major, minor, micro = (_version_part(version.get(k, 0)) for k in ("major", "minor", "micro"))
                if major is not None and minor is not None and micro is not None:
                    return f"{major}.{minor:02d}.{micro}"
    return ""


def number(value: Any, default: int = 0) -> int:
    """Plain ints (22.05) and `{"set", "infinite", "number"}` wrappers (23.02+)."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return default
        value = value.get("number", default)
        if isinstance(value, Mapping):
            fail("a number wrapper inside a number wrapper")
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if abs(value) >= 2**64:
            fail(f"a number beyond 64 bits: {str(value)[:40]}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= 2**64:
            fail("a number Slurm would not print")
        return int(value)
    if isinstance(value, str):
        digits = value.strip()
        return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= MAX_NUMBER else default
    fail(f"expected a number, got {type(value).__name__}")


def text(value: Any) -> str:
    """A text field; a number is written out, a list or object is an error."""
    if value is None:
        return ""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(number(value))
    fail(f"expected text, got {type(value).__name__}")


def states(value: Any) -> list[str]:
    """`"idle"` or `["IDLE", "DRAIN"]` -> ['IDLE', 'DRAIN']."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value[:64].upper()] if value else []
    if isinstance(value, list) and len(value) <= MAX_LIST:
        if not all(isinstance(v, str) for v in value):
            fail("a state list with entries that are not text")
        return [v[:64].upper() for v in value if v]
    fail(f"expected a state or a list of states, got {type(value).__name__}")


def hostnames(value: Any) -> tuple[str, ...]:
    try:
        return expand_hostlist(text(value))
    except HostlistError as err:
        fail(str(err))


def flag(value: Any) -> bool:
    return value if isinstance(value, bool) else isinstance(value, int) and value != 0


def id_number(value: Any) -> int | None:
    """A uid/gid (or job id part): a plain or wrapped non-negative integer below 2**32, else None."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**32 - 1:
        return value
    return None


def entries(document: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The objects of list `key`; SlurmJsonError when it is missing, not a list, or holds non-objects."""
    found = document.get(key)
    if not isinstance(found, list):
        fail(f"Slurm JSON without a '{key}' list")
    if not all(isinstance(e, Mapping) for e in found):
        fail(f"a '{key}' list with entries that are not objects")
    return found
