"""NVSentinel's protobuf messages and gRPC names, to and from goodput's `HealthEvent` model.

The gRPC receiver reads `datamodels.HealthEvents`, and the push-back writes them; both go through
these two conversions, so the model's bounds and checks apply to binary events as to JSON ones.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from activities.adapters.nvsentinel.proto import health_event_pb2 as pb
from goodput.detect.nvsentinel import BehaviourOverrides, HealthEvent, NvSentinelEventError, parse_event

PLATFORM_CONNECTOR = "datamodels.PlatformConnector"
METHOD = "HealthEventOccurredV1"
LEGACY_METHOD = "HealthEventOccuredV1"  # older NVSentinel releases spell the rpc so


def _proto_overrides(message: pb.HealthEvent, name: str) -> BehaviourOverrides | None:
    if not message.HasField(name):
        return None
    value: pb.BehaviourOverrides = getattr(message, name)
    return BehaviourOverrides(force=value.force, skip=value.skip)


def event_from_proto(message: pb.HealthEvent) -> HealthEvent:
    """The model of a protobuf event; an impossible timestamp is a rejection, not a crash."""
    stamp: datetime | None = None
    if message.HasField("generatedTimestamp"):
        try:
            stamp = message.generatedTimestamp.ToDatetime(tzinfo=UTC)
        except (ValueError, OverflowError, OSError) as err:
            raise NvSentinelEventError(f"invalid generatedTimestamp: {err}") from None
    data: dict[str, Any] = {
        "version": message.version, "agent": message.agent, "component_class": message.componentClass,
        "check_name": message.checkName, "is_fatal": message.isFatal, "is_healthy": message.isHealthy,
        "message": message.message, "recommended_action": int(message.recommendedAction),
        "error_code": list(message.errorCode[:64]),
        "entities_impacted": [{"entity_type": e.entityType, "entity_value": e.entityValue}
                              for e in message.entitiesImpacted[:64]],
        "generated_timestamp": stamp, "node_name": message.nodeName,
        "quarantine_overrides": _proto_overrides(message, "quarantineOverrides"),
        "drain_overrides": _proto_overrides(message, "drainOverrides"),
        "processing_strategy": int(message.processingStrategy),
    }
    return parse_event(data)


def event_to_proto(event: HealthEvent) -> pb.HealthEvent:
    message = pb.HealthEvent(
        version=event.version, agent=event.agent, componentClass=event.component_class, checkName=event.check_name,
        isFatal=event.is_fatal, isHealthy=event.is_healthy, message=event.message,
        recommendedAction=event.recommended_action.number,  # type: ignore[arg-type]  # the enum is an int
        errorCode=list(event.error_code), nodeName=event.node_name,
        processingStrategy=event.processing_strategy.number)  # type: ignore[arg-type]
    message.entitiesImpacted.extend(pb.Entity(entityType=e.entity_type, entityValue=e.entity_value)
                                    for e in event.entities_impacted)
    if event.generated_timestamp is not None:
        message.generatedTimestamp.FromDatetime(event.generated_timestamp)
    for name, overrides in (("quarantineOverrides", event.quarantine_overrides),
                            ("drainOverrides", event.drain_overrides)):
        if overrides is not None:
            getattr(message, name).CopyFrom(pb.BehaviourOverrides(force=overrides.force, skip=overrides.skip))
    return message
