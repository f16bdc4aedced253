"""One NVSentinel health event, from either transport, as one bounded model, and its parse.

NVSentinel (NVIDIA's GPU-fleet health monitor for Kubernetes) raises a `HealthEvent` whenever one
of its monitors sees something on a node: an Xid in the kernel log, a DCGM health check, a cloud
provider's maintenance notice. goodput receives those events over gRPC (NVSentinel's platform
connector interface) or as CloudEvents over HTTP; both transports end here, in one model.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated

from pydantic import BeforeValidator, Field, StrictBool, ValidationError, field_validator

from goodput.detect.nvsentinel.disposition import Triage, triage
from goodput.detect.nvsentinel.wire import (
    _NO_OVERRIDES,
    BehaviourOverrides,
    Entity,
    Name,
    ProcessingStrategy,
    RecommendedAction,
    Text,
    _bounded_list,
    _Wire,
)


class NvSentinelEventError(ValueError):
    """An event that cannot be used: malformed, or naming a node that no scheduler call may carry."""


class UnknownEventNodeError(NvSentinelEventError):
    """The event names a node Slurm does not know: nothing is done for it."""


class HealthEvent(_Wire):
    """One NVSentinel health event, from either transport, bounded and cleaned."""

    version: int = Field(default=0, ge=0, le=2**32 - 1)
    agent: Name = ""
    component_class: Name = ""
    check_name: Name = ""
    is_fatal: StrictBool = False
    is_healthy: StrictBool = False
    message: Text = ""
    recommended_action: Annotated[RecommendedAction, BeforeValidator(RecommendedAction.from_wire)] = (
        RecommendedAction.NONE)
    error_code: Annotated[tuple[Name, ...], BeforeValidator(_bounded_list)] = ()
    entities_impacted: Annotated[tuple[Entity, ...], BeforeValidator(_bounded_list)] = ()
    generated_timestamp: datetime | None = None
    node_name: Name = ""
    quarantine_overrides: BehaviourOverrides | None = None
    drain_overrides: BehaviourOverrides | None = None
    processing_strategy: Annotated[ProcessingStrategy, BeforeValidator(ProcessingStrategy.from_wire)] = (
        ProcessingStrategy.UNSPECIFIED)

    @field_validator("generated_timestamp")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @property
    def store_only(self) -> bool:
        return self.processing_strategy is ProcessingStrategy.STORE_ONLY

    def triage(self) -> Triage:
        return triage(is_fatal=self.is_fatal, is_healthy=self.is_healthy, action=self.recommended_action,
                      strategy=self.processing_strategy,
                      quarantine=self.quarantine_overrides or _NO_OVERRIDES,
                      drain=self.drain_overrides or _NO_OVERRIDES)


def parse_event(data: object) -> HealthEvent:
    """A `HealthEvent` from its protobuf-JSON form (camelCase keys, enums as names or numbers)."""
    if not isinstance(data, Mapping):
        raise NvSentinelEventError(f"a health event must be a JSON object, got {_json_type(data)}")
    try:
        return HealthEvent.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "event"
        raise NvSentinelEventError(f"invalid health event: {where}: {first.get('msg', 'invalid')}") from None


def _json_type(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")
