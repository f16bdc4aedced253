"""DCGM-exporter's Prometheus text exposition, parsed into the same `GpuSample`s NVML gives.

Clusters that already run dcgm-exporter should not need a second agent on every node: goodput
scrapes `/metrics` and reads it here. The parser is a strict implementation of the text format
(HELP/TYPE comments, escaped label values, NaN/±Inf, optional timestamps) so that a garbage body
is a clear `ExpositionError` with a line number instead of a quietly empty answer.

`ExpositionError` is the only error either function raises. Label values are partly written by
jobs (`hpc_job`, the Xid's `err_msg`), so values are distrusted too: a timestamp is bounded before
conversion, a value a DCGM field cannot hold (a negative ECC count, an Xid code of 1e300) is
reported in the sample's `errors` and left unknown, like NaN, and label texts are clipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from goodput.detect.gpu import (
    GpuRecoveryAction,
    GpuSample,
    XidEvent,
    decode_clock_event_reasons,
    normalize_pci_bus_id,
)
from goodput.untrusted_text import bounded_int

# Python's `re` is safe here: both are anchored (`.match` at a position) and a single character
# class repeated, so a match attempt reads each character at most once.
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
# Prometheus timestamps are int64 milliseconds.
MAX_TIMESTAMP_DIGITS = 18
MAX_LABEL_CHARS = 256
MAX_MESSAGE_CHARS = 1024
MAX_COUNTER = 2**53  # exactly representable in the float the exposition carries
MAX_XID_CODE = 100_000
MAX_GPU_INDEX_DIGITS = 6


class ExpositionError(ValueError):
    """Not a usable exposition; `line_no` is 0 when the fault is not on one line."""

    def __init__(self, line_no: int, message: str, line: str = "") -> None:
        snippet = f": {line[:80]!r}" if line else ""
        super().__init__(f"line {line_no}: {message}{snippet}" if line_no else f"{message}{snippet}")
        self.line_no = line_no


@dataclass(frozen=True)
class Metric:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float = 0.0
    timestamp_ms: int | None = None


def _parse_value(text: str) -> float:
    lowered = text.lower()
    if lowered in {"nan", "+inf", "inf", "-inf"}:
        return float(lowered)
    value = float(text)  # ValueError for garbage; the caller adds the line number
    if text.strip() != text or "_" in text:
        raise ValueError(text)
    return value


def _skip_blanks(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _parse_labels(line: str, pos: int, line_no: int) -> tuple[dict[str, str], int]:
    """Labels from just after `{`; returns them and the index just after `}`."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        pos = _skip_blanks(line, pos)
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        match = _LABEL_NAME.match(line, pos)
        if not match:
            raise ExpositionError(line_no, "bad label name", line)
        name, pos = match.group(), match.end()
        pos = _skip_blanks(line, pos)
        if pos >= n or line[pos] != "=":
            raise ExpositionError(line_no, f"label {name} has no value", line)
        pos = _skip_blanks(line, pos + 1)
        if pos >= n or line[pos] != '"':
            raise ExpositionError(line_no, f"label {name} has no quoted value", line)
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= n:
                raise ExpositionError(line_no, "unterminated label value", line)
            ch = line[pos]
            if ch == "\\" and pos + 1 < n:
                chars.append(_ESCAPES.get(line[pos + 1], "\\" + line[pos + 1]))
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                chars.append(ch)
                pos += 1
        if name in labels:
            raise ExpositionError(line_no, f"duplicate label {name}", line)
        labels[name] = "".join(chars)
        pos = _skip_blanks(line, pos)
        if pos < n and line[pos] == ",":
            pos += 1
        elif pos < n and line[pos] != "}":
            raise ExpositionError(line_no, "expected , or } after a label", line)


def parse_exposition(text: str) -> list[Metric]:
    """Every sample line of a Prometheus text exposition, in order."""
    metrics: list[Metric] = []
    for line_no, raw in enumerate(text.split("\n"), start=1):  # not splitlines: \x1c is data
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _NAME.match(line)
        if not match:
            raise ExpositionError(line_no, "not a metric line", line)
        name, pos = match.group(), match.end()
        labels: dict[str, str] = {}
        brace = line.find("{", pos)
        if brace >= 0 and not line[pos:brace].strip():  # the Go parser allows blanks before "{"
            pos = brace
        if pos < len(line) and line[pos] == "{":
            labels, pos = _parse_labels(line, pos + 1, line_no)
        rest = line[pos:].split()
        if (pos < len(line) and line[pos] not in " \t") or not 1 <= len(rest) <= 2:
            raise ExpositionError(line_no, "expected a value and an optional timestamp", line)
        try:
            value = _parse_value(rest[0])
        except ValueError:
            raise ExpositionError(line_no, "bad value or timestamp", line) from None
        timestamp = bounded_int(rest[1], max_digits=MAX_TIMESTAMP_DIGITS, signed=True) if len(rest) == 2 else None
        if len(rest) == 2 and timestamp is None:
            raise ExpositionError(line_no, "bad value or timestamp", line)
        metrics.append(Metric(name, labels, value, timestamp))
    return metrics


# DCGM field → (GpuSample field, type). Counters arrive as floats in the exposition.
_FIELDS: dict[str, tuple[str, type[float] | type[int] | type[bool]]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilisation_pct", float),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("memory_utilisation_pct", float),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", float),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("max_sm_clock_mhz", float),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", float),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", float),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_volatile_corrected", int),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_volatile_uncorrected", int),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_aggregate_corrected", int),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_aggregate_uncorrected", int),
    "DCGM_FI_DEV_RETIRED_SBE": ("retired_pages_sbe", int),
    "DCGM_FI_DEV_RETIRED_DBE": ("retired_pages_dbe", int),
    "DCGM_FI_DEV_RETIRED_PENDING": ("retired_pages_pending", bool),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_correctable", int),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows_uncorrectable", int),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("row_remap_pending", bool),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row_remap_failure", bool),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay_count", int),
}
_CLOCK_REASONS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
_RECOVERY = ("DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "DCGM_FI_DEV_GPU_RECOVERY_ACTION")
JOB_LABELS = ("hpc_job", "HPC_JOB", "job_id")


def _gpu_key(labels: dict[str, str]) -> tuple[str, str] | None:
    ident = labels.get("UUID") or labels.get("pci_bus_id") or labels.get("gpu")
    return (labels.get("Hostname", ""), ident) if ident else None


def samples_from_metrics(metrics: Iterable[Metric], *, observed_at: datetime | None = None,
                         node: str | None = None) -> list[GpuSample]:
    """One `GpuSample` per GPU (by Hostname and UUID), fields from the DCGM series it carries.

    dcgm-exporter repeats a series once per HPC job sharing a GPU; their `hpc_job` labels are
    gathered into `job_ids`. NaN (a field DCGM could not read) becomes None like NVML's
    NotSupported; so does a value the field cannot hold, with the reason in `errors`. `node`
    overrides the Hostname label, which may be a container's name.
    """
    fields: dict[tuple[str, str], dict[str, object]] = {}
    jobs: dict[tuple[str, str], list[str]] = {}
    messages: dict[tuple[str, str], str] = {}
    errors: dict[tuple[str, str], list[str]] = {}
    for metric in metrics:
        if not metric.name.startswith("DCGM_FI_"):
            continue
        key = _gpu_key(metric.labels)
        if key is None:
            continue
        row = fields.setdefault(key, _identity(metric.labels, node))
        job = next((metric.labels[k] for k in JOB_LABELS if metric.labels.get(k)), None)
        if job and job != "0" and job not in jobs.setdefault(key, []):
            jobs[key].append(job[:MAX_LABEL_CHARS])
        if math.isnan(metric.value) or math.isinf(metric.value):
            continue
        error = _set_field(row, metric.name, metric.value)
        if error:
            errors.setdefault(key, []).append(error)
        elif metric.name == "DCGM_FI_DEV_XID_ERRORS":
            # Evidence is one line of bounded length.
            messages[key] = " ".join(metric.labels.get("err_msg", "")[:MAX_MESSAGE_CHARS].split())
    samples = []
    for key, row in fields.items():
        row["job_ids"] = tuple(jobs.get(key, ()))
        row["observed_at"] = observed_at
        row["errors"] = tuple(dict.fromkeys(errors.get(key, ())))
        try:
            sample = GpuSample.model_validate(row)
            if sample.last_xid:
                # DCGM reports only the last Xid, not each occurrence; callers diff successive scrapes.
                event = XidEvent(code=sample.last_xid, pci_bus_id=sample.pci_bus_id, gpu_index=sample.index,
                                 uuid=sample.uuid, node=sample.node, message=messages.get(key, ""),
                                 source="dcgm", observed_at=observed_at)
                sample = sample.model_copy(update={"xid_events": (event,)})
        except ValidationError as err:  # every field is bounded above; this is the last guard
            raise ExpositionError(0, f"GPU {key[1][:MAX_LABEL_CHARS]!r}: {err.errors()[0]['msg']}") from None
        samples.append(sample)
    return sorted(samples, key=lambda s: (s.node or "", s.index if s.index is not None else 1 << 30))


def _set_field(row: dict[str, object], name: str, value: float) -> str | None:
    """Sets the field series `name` carries in `row`; the reason instead when `value` cannot be
    that field (the row keeps None for it). Series goodput does not read are left out."""
    if name in _FIELDS:
        target, kind = _FIELDS[name]
        if kind is int and not 0 <= value <= MAX_COUNTER:
            return f"{target}: {value:g} is not a count"
        row[target] = bool(value) if kind is bool else (int(value) if kind is int else value)
    elif name in _CLOCK_REASONS:
        if not 0 <= value < 2**32:
            return f"clock_event_mask: {value:g} is not a 32-bit mask"
        row["clock_event_mask"] = int(value)
        row["clock_event_reasons"] = decode_clock_event_reasons(int(value))
    elif name in _RECOVERY:
        row["recovery_action"] = GpuRecoveryAction.from_code(int(value)) if 0 <= value < 2**31 else None
    elif name == "DCGM_FI_DEV_XID_ERRORS":
        if not 0 <= value <= MAX_XID_CODE:
            return f"last_xid: {value:g} is not an Xid code"
        row["last_xid"] = int(value)
    return None


def _label(labels: dict[str, str], name: str) -> str | None:
    return labels.get(name, "")[:MAX_LABEL_CHARS] or None


def _identity(labels: dict[str, str], node: str | None) -> dict[str, object]:
    pci = _label(labels, "pci_bus_id")
    return {
        "index": bounded_int(labels.get("gpu"), max_digits=MAX_GPU_INDEX_DIGITS),
        "uuid": _label(labels, "UUID"),
        "pci_bus_id": normalize_pci_bus_id(pci) if pci else None,
        "name": _label(labels, "modelName"),
        "node": node or _label(labels, "Hostname"),
    }


def parse_dcgm_metrics(text: str, *, observed_at: datetime | None = None,
                       node: str | None = None) -> list[GpuSample]:
    """Exposition text → samples; `ExpositionError` (only) when the text is not a usable exposition."""
    return samples_from_metrics(parse_exposition(text), observed_at=observed_at, node=node)
