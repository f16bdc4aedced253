"""One event as a transport delivered it, read lazily: cheap to triage, converted only when worth it.

On a real fleet almost every event is healthy or recommends nothing. Each transport's `Incoming`
settles that from a few fields of what arrived (the protobuf message, the CloudEvent's JSON),
before any model is built, so the common case stays free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from activities.adapters.nvsentinel.messages import event_from_proto
from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import (
    ACTION_NUMBERS,
    HealthEvent,
    RecommendedAction,
    Triage,
    clean_text,
    parse_event,
    triage,
    triage_json,
)

_ACTIONS_BY_NUMBER = {number: action for action, number in ACTION_NUMBERS.items()}


class Incoming(Protocol):
    """One event as a transport delivered it, read lazily."""

    def quick(self) -> Triage | None:
        """The triage when a few fields settle it (healthy, nothing recommended), else None."""
        ...

    def healthy_check(self) -> tuple[str, str] | None:
        """(node, check) of a healthy event, to forget that check's remembered faults."""
        ...

    def action(self) -> str:
        """The recommended action's name, for the metric (bounded: names or `invalid`)."""
        ...

    def parse(self) -> HealthEvent:
        """The whole event, validated; raises NvSentinelEventError."""
        ...


class ProtoIncoming:
    """An event from the gRPC sink: triaged from the message's fields, converted only when worth it."""

    __slots__ = ("_message",)

    def __init__(self, message: pb.HealthEvent) -> None:
        self._message = message

    def quick(self) -> Triage | None:
        """Healthy, or nothing recommended: settled from the message's flags without converting it."""
        m = self._message
        if m.isHealthy:
            return triage(is_fatal=m.isFatal, is_healthy=True, action=RecommendedAction.NONE)
        quarantine = m.quarantineOverrides if m.HasField("quarantineOverrides") else None
        if not m.isFatal and m.recommendedAction == 0 and (quarantine is None or not quarantine.force):
            return triage(is_fatal=False, is_healthy=False, action=RecommendedAction.NONE)
        return None

    def healthy_check(self) -> tuple[str, str] | None:
        """(node, check) when the message reports a check healthy again."""
        m = self._message
        return (clean_text(m.nodeName, 256), clean_text(m.checkName, 256)) if m.isHealthy else None

    def action(self) -> str:
        """The recommended action's name from its enum number; unknown numbers read as `unknown`."""
        return _ACTIONS_BY_NUMBER.get(int(self._message.recommendedAction), RecommendedAction.UNKNOWN).value

    def parse(self) -> HealthEvent:
        """The message converted and validated (`event_from_proto`)."""
        return event_from_proto(self._message)


class JsonIncoming:
    """An event from a CloudEvent's `data.healthEvent` (protobuf JSON)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def quick(self) -> Triage | None:
        """The triage `triage_json` settles from the JSON's flags alone, else None."""
        return triage_json(self._data)

    def healthy_check(self) -> tuple[str, str] | None:
        """(node, check) of a healthy event; None when either is missing or not text."""
        if self._data.get("isHealthy") is not True:
            return None
        node, check = self._data.get("nodeName"), self._data.get("checkName")
        if not isinstance(node, str) or not isinstance(check, str | None):
            return None
        return clean_text(node, 256), clean_text(check or "", 256)

    def action(self) -> str:
        """The recommended action's name; `invalid` when the JSON holds no action NVSentinel defines."""
        try:
            return RecommendedAction.from_wire(self._data.get("recommendedAction")).value
        except ValueError:
            return "invalid"

    def parse(self) -> HealthEvent:
        """The JSON parsed and validated (`parse_event`)."""
        return parse_event(self._data)
