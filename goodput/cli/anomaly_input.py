"""Turning `goodput inject` flags or a JSON file into a validated Anomaly.

Pure, so every rejection (bad JSON, unknown kind, hostile node name) is a clear message tested
without a server. Times default to "now" as passed in by the caller. `AnomalyInputError` is the
only error that escapes: deep nesting, integers too long to convert, NaN and text that is not
Unicode (a lone surrogate from JSON or from undecodable argv bytes) are all reported through it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from goodput.models import Anomaly, AnomalyKind, AnomalySource

MAX_JSON_BYTES = 1 << 20
MAX_INT_CHARS = 19  # ids, attempts, ranks and steps all fit in 18 digits and a sign


class AnomalyInputError(ValueError):
    pass


def _json_int(text: str) -> int:
    if len(text) > MAX_INT_CHARS:
        raise AnomalyInputError(f"a number of {len(text)} characters is longer than any field takes")
    return int(text)


def _json_constant(name: str) -> float:
    raise AnomalyInputError(f"{name} is not a number any field takes")


def _explain(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e["loc"]) or "anomaly"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def from_json_file(path: Path, now: datetime) -> Anomaly:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)  # never more than the limit, whatever the file's size
    except OSError as err:
        raise AnomalyInputError(f"cannot read {path}: {err.strerror or err}") from err
    return from_json_bytes(raw, now, source=str(path))


def from_json_bytes(raw: bytes, now: datetime, *, source: str = "input") -> Anomaly:
    """One JSON object; `source` names it in messages."""
    if len(raw) > MAX_JSON_BYTES:
        raise AnomalyInputError(f"{source} is larger than {MAX_JSON_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"), parse_int=_json_int,
                          parse_constant=_json_constant)
    except json.JSONDecodeError as err:
        raise AnomalyInputError(f"{source} is not valid JSON: {err.msg} at line {err.lineno}") from err
    except AnomalyInputError as err:
        raise AnomalyInputError(f"{source}: {err}") from None
    except RecursionError:
        raise AnomalyInputError(f"{source} is nested too deeply") from None
    if not isinstance(data, dict):
        raise AnomalyInputError(f"{source} must hold one JSON object, not {type(data).__name__}")
    return from_mapping(data, now)


def _require_unicode(data: dict[str, Any]) -> None:
    try:
        json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as err:
        bad = err.object[err.start:err.end].encode("unicode_escape").decode("ascii")
        raise AnomalyInputError(f"invalid anomaly: text holds {bad}, which is not Unicode text") from None
    except (ValueError, RecursionError) as err:  # a circular or absurdly deep mapping from a caller
        raise AnomalyInputError(f"invalid anomaly: {err}") from None


def from_mapping(data: dict[str, Any], now: datetime) -> Anomaly:
    _require_unicode(data)
    if "log_marks" in data:  # they tell a resumed log watcher which lines to skip: its own to set
        raise AnomalyInputError("invalid anomaly: log_marks is set by goodput's log watchers only")
    defaults: dict[str, Any] = {"id": f"manual-{uuid.uuid4().hex[:12]}", "source": "operator",
                                "observed_at": now, "detected_at": now}
    try:
        return Anomaly.model_validate({**defaults, **data})
    except ValidationError as err:
        raise AnomalyInputError(f"invalid anomaly: {_explain(err)}") from err


def from_flags(*, job_id: str, kind: str, cluster: str, attempt: int, nodes: Sequence[str],
               evidence: Sequence[str], category: str | None, now: datetime) -> Anomaly:
    if kind not in {k.value for k in AnomalyKind}:
        raise AnomalyInputError(
            f"unknown kind {kind!r}; one of: {', '.join(k.value for k in AnomalyKind)}")
    data: dict[str, Any] = {"source": AnomalySource.OPERATOR.value, "kind": kind, "job_id": job_id,
                            "cluster": cluster, "job_attempt": attempt, "nodes": list(nodes),
                            "evidence": list(evidence)}
    if category:
        data["category"] = category
    return from_mapping(data, now)
