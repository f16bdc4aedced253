"""NVSentinel's event exporter's CloudEvents (HTTP): one structured-mode CloudEvents 1.0 body, checked.

The body comes from the network: numbers, nesting and the attributes are bounded before anything
reads them, and the health event under `data.healthEvent` stays JSON, so it is triaged before it
is validated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from goodput.detect.nvsentinel.events import _json_type
from goodput.detect.nvsentinel.wire import MAX_NAME_CHARS, clean_text

MAX_JSON_INT_CHARS = 40
MAX_JSON_DEPTH = 32


class CloudEventError(ValueError):
    """A CloudEvents body that is not a usable NVSentinel health event (HTTP 400)."""


CLOUDEVENTS_TYPE = "application/cloudevents+json"


@dataclass(frozen=True, slots=True)
class CloudEvent:
    id: str
    source: str
    type: str
    event: Mapping[str, Any]
    """`data.healthEvent`, still as JSON: triaged before it is validated."""


def _bounded_int(text: str) -> int:
    if len(text) > MAX_JSON_INT_CHARS:
        raise ValueError(f"a number of {len(text)} digits")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number too large")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: object, limit: int) -> bool:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return True


def parse_cloudevent(body: bytes) -> CloudEvent:
    """A structured-mode CloudEvents 1.0 body (one event) carrying `data.healthEvent`."""
    try:
        text = body.decode("utf-8")
        document = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float,
                              parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise CloudEventError("the body is not UTF-8") from None
    except RecursionError:
        raise CloudEventError("the body is nested too deeply") from None
    except ValueError as err:
        raise CloudEventError(f"the body is not JSON: {str(err)[:200]}") from None
    if not isinstance(document, dict):
        raise CloudEventError(f"a structured CloudEvent is a JSON object, got {_json_type(document)} "
                              "(batched mode is not supported)")
    if not _depth(document, MAX_JSON_DEPTH):
        raise CloudEventError(f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    version = document.get("specversion")
    if version != "1.0":
        raise CloudEventError(f"specversion must be \"1.0\", got {str(version)[:20]!r}")
    attributes = {}
    for name in ("id", "source", "type"):
        value = document.get(name)
        if not isinstance(value, str) or not value:
            raise CloudEventError(f"the CloudEvent has no {name!r} attribute (required by CloudEvents 1.0)")
        attributes[name] = clean_text(value, MAX_NAME_CHARS)
    content_type = document.get("datacontenttype")
    if content_type is not None and (not isinstance(content_type, str)
                                     or content_type.split(";")[0].strip().lower() != "application/json"):
        raise CloudEventError(f"datacontenttype must be application/json, got {str(content_type)[:60]!r}")
    if "data_base64" in document:
        raise CloudEventError("data_base64 is not supported: send the health event as JSON under data.healthEvent")
    data = document.get("data")
    if not isinstance(data, dict):
        raise CloudEventError("the CloudEvent has no data object")
    event = data.get("healthEvent")
    if not isinstance(event, dict):
        raise CloudEventError("the CloudEvent's data has no healthEvent object")
    return CloudEvent(id=attributes["id"], source=attributes["source"], type=attributes["type"], event=event)
