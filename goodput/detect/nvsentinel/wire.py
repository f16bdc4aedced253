"""NVSentinel's wire vocabulary: its enum names and numbers, bounded text, the small nested messages.

Events come from the network: every string and list is bounded here, as the model reads it, and
control characters never survive, so an event cannot forge extra evidence or log lines. The
names and numbers are NVSentinel's (data-models/protobufs/health_event.proto), so both
transports (protobuf JSON and binary protobuf) read to the same values.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, StrictBool
from pydantic.alias_generators import to_camel

MAX_TEXT = 4096
MAX_NAME_CHARS = 256
MAX_LIST = 32


class RecommendedAction(StrEnum):
    NONE = "NONE"
    COMPONENT_RESET = "COMPONENT_RESET"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    RUN_FIELDDIAG = "RUN_FIELDDIAG"
    RESTART_VM = "RESTART_VM"
    RESTART_BM = "RESTART_BM"
    REPLACE_VM = "REPLACE_VM"
    RUN_DCGMEUD = "RUN_DCGMEUD"
    RESTART_APP = "RESTART_APP"
    UNKNOWN = "UNKNOWN"

    @property
    def number(self) -> int:
        return ACTION_NUMBERS[self]

    @classmethod
    def from_wire(cls, value: object) -> RecommendedAction:
        """A name (protobuf JSON), a number (binary, or JSON written with numbers) or nothing (the
        proto3 default). A value this release does not know (a newer NVSentinel) is UNKNOWN, an
        action all the same, never NONE."""
        if value is None:
            return cls.NONE
        if isinstance(value, bool):
            raise ValueError("recommendedAction must be a name or a number")
        if isinstance(value, int):
            return _ACTION_BY_NUMBER.get(value, cls.UNKNOWN)
        if isinstance(value, str):
            try:
                return cls(value.strip().upper())
            except ValueError:
                return cls.UNKNOWN
        raise ValueError("recommendedAction must be a name or a number")


ACTION_NUMBERS: dict[RecommendedAction, int] = {
    RecommendedAction.NONE: 0, RecommendedAction.COMPONENT_RESET: 2, RecommendedAction.CONTACT_SUPPORT: 5,
    RecommendedAction.RUN_FIELDDIAG: 6, RecommendedAction.RESTART_VM: 15, RecommendedAction.RESTART_BM: 24,
    RecommendedAction.REPLACE_VM: 25, RecommendedAction.RUN_DCGMEUD: 26, RecommendedAction.RESTART_APP: 39,
    RecommendedAction.UNKNOWN: 99,
}
_ACTION_BY_NUMBER = {number: action for action, number in ACTION_NUMBERS.items()}


class ProcessingStrategy(StrEnum):
    UNSPECIFIED = "UNSPECIFIED"  # treated as EXECUTE_REMEDIATION
    EXECUTE_REMEDIATION = "EXECUTE_REMEDIATION"
    STORE_ONLY = "STORE_ONLY"

    @property
    def number(self) -> int:
        return _STRATEGY_NUMBERS[self]

    @classmethod
    def from_wire(cls, value: object) -> ProcessingStrategy:
        if value is None:
            return cls.UNSPECIFIED
        if isinstance(value, bool):
            raise ValueError("processingStrategy must be a name or a number")
        if isinstance(value, int):
            return _STRATEGY_BY_NUMBER.get(value, cls.UNSPECIFIED)
        if isinstance(value, str):
            try:
                return cls(value.strip().upper())
            except ValueError:
                raise ValueError(f"unknown processingStrategy {value[:40]!r}") from None
        raise ValueError("processingStrategy must be a name or a number")


_STRATEGY_NUMBERS = {ProcessingStrategy.UNSPECIFIED: 0, ProcessingStrategy.EXECUTE_REMEDIATION: 1,
                     ProcessingStrategy.STORE_ONLY: 2}
_STRATEGY_BY_NUMBER = {number: strategy for strategy, number in _STRATEGY_NUMBERS.items()}


def clean_text(value: object, limit: int = MAX_TEXT) -> str:
    """One line of printable text, at most `limit` characters: control characters (newlines
    included) become spaces, so an event cannot forge extra evidence or log lines."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    text = value[: limit * 2]
    text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return text if len(text) <= limit else text[:limit] + "…[truncated]"


def _name(value: object) -> str:
    return clean_text(value, MAX_NAME_CHARS)


def _bounded_list(value: object) -> object:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(value[:MAX_LIST])
    return value


Text = Annotated[str, BeforeValidator(clean_text)]
Name = Annotated[str, BeforeValidator(_name)]


class _Wire(BaseModel):
    """NVSentinel's camelCase field names (protobuf JSON) on the wire, snake_case in Python."""

    model_config = ConfigDict(frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True)


class Entity(_Wire):
    entity_type: Name = ""
    entity_value: Name = ""


class BehaviourOverrides(_Wire):
    force: StrictBool = False
    skip: StrictBool = False


_NO_OVERRIDES = BehaviourOverrides()
