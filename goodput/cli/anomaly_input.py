"""Turning `goodput inject` flags or a JSON file into a validated Anomaly.

Pure, so every rejection (bad JSON, unknown kind, hostile node name) is a clear message tested
without a server. Times default to "now" as passed in by the caller.
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


class AnomalyInputError(ValueError):
    pass


def _explain(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e["loc"]) or "anomaly"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def from_json_file(path: Path, now: datetime) -> Anomaly:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise AnomalyInputError(f"cannot read {path}: {err.strerror or err}") from err
    if len(raw) > MAX_JSON_BYTES:
        raise AnomalyInputError(f"{path} is larger than {MAX_JSON_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as err:
        raise AnomalyInputError(f"{path} is not valid JSON: {err.msg} at line {err.lineno}") from err
    if not isinstance(data, dict):
        raise AnomalyInputError(f"{path} must hold one JSON object, not {type(data).__name__}")
    return from_mapping(data, now)


def from_mapping(data: dict[str, Any], now: datetime) -> Anomaly:
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
